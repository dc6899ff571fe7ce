package storage

import (
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// TestUUIDsEncodeAsTheirBytes: with encodeUUIDs, a uuid.UUID, a pointer to one
// and a slice of them are encoded by the uuid codec from their bytes, never
// through their driver.Valuer's text, and read back unchanged; a nil pointer is
// NULL.
func TestUUIDsEncodeAsTheirBytes(t *testing.T) {
	m := pgtype.NewMap()
	encodeUUIDs(m)
	id := uuid.Must(uuid.NewV7())
	if plan := m.PlanEncode(pgtype.UUIDOID, pgtype.BinaryFormatCode, id); plan == nil {
		t.Fatal("no plan for a uuid.UUID")
	} else if _, ok := plan.(*uuidEncodePlan); !ok {
		t.Fatalf("a uuid.UUID is encoded by %T, not as its bytes", plan)
	}
	b, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, id, nil)
	if err != nil || !slices.Equal(b, id[:]) {
		t.Fatalf("encoded %x, %v; want %x", b, err, id[:])
	}
	if b, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, &id, nil); err != nil || !slices.Equal(b, id[:]) {
		t.Fatalf("a pointer encoded %x, %v; want %x", b, err, id[:])
	}
	if b, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, (*uuid.UUID)(nil), nil); err != nil || b != nil {
		t.Fatalf("a nil pointer encoded %x, %v; want NULL", b, err)
	}
	ids := []uuid.UUID{id, uuid.New(), uuid.Nil}
	b, err = m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	var back []uuid.UUID
	if err := m.Scan(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, b, &back); err != nil || !slices.Equal(back, ids) {
		t.Fatalf("an array read back as %v, %v; want %v", back, err, ids)
	}
	text, err := m.Encode(pgtype.UUIDOID, pgtype.TextFormatCode, id, nil)
	if err != nil || string(text) != id.String() {
		t.Fatalf("text form %q, %v; want %q", text, err, id.String())
	}
}

// TestUUIDsReadAsTheirBytes: with decodeUUIDs, a binary uuid is read into a
// uuid.UUID by copying its bytes (not through uuid.UUID's sql.Scanner, which parsed
// the text pgx formatted), into a *uuid.UUID as a pointer to them, and NULL as the
// zero UUID or a nil pointer; a uuid[] reads back whole, and text still reads.
func TestUUIDsReadAsTheirBytes(t *testing.T) {
	m := pgtype.NewMap()
	encodeUUIDs(m)
	decodeUUIDs(m)
	id := uuid.Must(uuid.NewV7())
	var got uuid.UUID
	if _, ok := m.PlanScan(pgtype.UUIDOID, pgtype.BinaryFormatCode, &got).(scanBinaryUUID); !ok {
		t.Fatalf("a uuid.UUID is read by %T, not from its bytes", m.PlanScan(pgtype.UUIDOID, pgtype.BinaryFormatCode, &got))
	}
	if err := m.Scan(pgtype.UUIDOID, pgtype.BinaryFormatCode, id[:], &got); err != nil || got != id {
		t.Fatalf("read %s, %v; want %s", got, err, id)
	}
	var ptr *uuid.UUID
	if err := m.Scan(pgtype.UUIDOID, pgtype.BinaryFormatCode, id[:], &ptr); err != nil || ptr == nil || *ptr != id {
		t.Fatalf("a pointer read %v, %v; want %s", ptr, err, id)
	}
	if err := m.Scan(pgtype.UUIDOID, pgtype.BinaryFormatCode, nil, &ptr); err != nil || ptr != nil {
		t.Fatalf("NULL read into a pointer as %v, %v; want nil", ptr, err)
	}
	if err := m.Scan(pgtype.UUIDOID, pgtype.BinaryFormatCode, nil, &got); err != nil || got != uuid.Nil {
		t.Fatalf("NULL read as %s, %v; want the zero UUID", got, err)
	}
	if err := m.Scan(pgtype.UUIDOID, pgtype.BinaryFormatCode, id[:8], &got); err == nil {
		t.Fatal("8 bytes read as a uuid")
	}
	ids := []uuid.UUID{id, uuid.New(), uuid.Nil}
	b, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	var back []uuid.UUID
	if err := m.Scan(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, b, &back); err != nil || !slices.Equal(back, ids) {
		t.Fatalf("an array read back as %v, %v; want %v", back, err, ids)
	}
	if err := m.Scan(pgtype.UUIDOID, pgtype.TextFormatCode, []byte(id.String()), &got); err != nil || got != id {
		t.Fatalf("text read as %s, %v; want %s", got, err, id)
	}
}
