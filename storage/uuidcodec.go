package storage

import (
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
