package storage

import (
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// encodeUUIDs makes a connection's type map encode a uuid.UUID (and, through
// pgx's own pointer and slice wrappers, a *uuid.UUID or a []uuid.UUID) as the 16
// bytes it is. Left to itself, pgx finds no plan for the type but its
// driver.Valuer: for every id it formatted the text form, failed to encode that
// text as a binary uuid (building an error message with fmt), parsed it back and
// only then wrote the bytes. On the claim and ack of batched workers, whose
// statements carry arrays of ids and lease tokens, that was a sixth of serve's CPU.
func encodeUUIDs(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapUUIDEncodePlan}, m.TryWrapEncodePlanFuncs...)
}

// uuidValue is a uuid.UUID as pgx's uuid codec takes it.
type uuidValue uuid.UUID

// UUIDValue implements pgtype.UUIDValuer.
func (u uuidValue) UUIDValue() (pgtype.UUID, error) {
	return pgtype.UUID{Bytes: u, Valid: true}, nil
}

func tryWrapUUIDEncodePlan(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if u, ok := value.(uuid.UUID); ok {
		return &uuidEncodePlan{}, uuidValue(u), true
	}
	return nil, nil, false
}

// uuidEncodePlan hands a uuid.UUID to the next plan as a uuidValue.
type uuidEncodePlan struct{ next pgtype.EncodePlan }

func (p *uuidEncodePlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *uuidEncodePlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(uuidValue(value.(uuid.UUID)), buf)
}

// decodeUUIDs makes a connection's type map read a uuid column in binary into a
// uuid.UUID (or, through pgx's pointer wrapper, a *uuid.UUID) by copying its 16
// bytes. Left to itself, pgx finds no plan for the type but its sql.Scanner: for
// every id it formatted the bytes as text, and uuid.UUID.Scan parsed the text
// back; a batched poll's claim and ack read two ids a row each, and those strings
// were a fifth of the allocations of reading their answers.
func decodeUUIDs(m *pgtype.Map) {
	m.RegisterType(&pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: uuidCodec{}})
}

// uuidCodec is pgx's uuid codec with a binary scan plan for a *uuid.UUID.
type uuidCodec struct{ pgtype.UUIDCodec }

// PlanScan implements pgtype.Codec.
func (c uuidCodec) PlanScan(m *pgtype.Map, oid uint32, format int16, target any) pgtype.ScanPlan {
	if _, ok := target.(*uuid.UUID); ok && format == pgtype.BinaryFormatCode {
		return scanBinaryUUID{}
	}
	return c.UUIDCodec.PlanScan(m, oid, format, target)
}

// scanBinaryUUID copies a binary uuid into a *uuid.UUID. NULL leaves the zero
// UUID, as uuid.UUID.Scan does.
type scanBinaryUUID struct{}

// Scan implements pgtype.ScanPlan.
func (scanBinaryUUID) Scan(src []byte, dst any) error {
	u := dst.(*uuid.UUID)
	switch len(src) {
	case 0:
		if src == nil {
			*u = uuid.Nil
			return nil
		}
	case 16:
		*u = uuid.UUID(src)
		return nil
	}
	return fmt.Errorf("a binary uuid is 16 bytes, not %d", len(src))
}
