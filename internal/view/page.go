package view

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/storage"
)

// ErrBadCursor is what DecodeCursor returns for a cursor that no listing handed
// out; its text is fit to show the caller.
var ErrBadCursor = errors.New("cursor is not one this API returned")

// EncodeCursor is the opaque next_cursor of a listing that stopped at cur; nil
// (JSON null) when the listing is complete.
func EncodeCursor(cur *storage.Cursor) *string {
	if cur == nil {
		return nil
	}
	s := base64.RawURLEncoding.EncodeToString([]byte(cur.Time.UTC().Format(time.RFC3339Nano) + "|" + cur.ID.String()))
	return &s
}

// DecodeCursor reads a cursor made by EncodeCursor; "" is the first page (nil).
// Anything else fails with ErrBadCursor.
func DecodeCursor(raw string) (*storage.Cursor, error) {
	if raw == "" {
		return nil, nil
	}
	if b, err := base64.RawURLEncoding.DecodeString(raw); err == nil {
		if ts, id, ok := strings.Cut(string(b), "|"); ok {
			t, errT := time.Parse(time.RFC3339Nano, ts)
			u, errU := uuid.Parse(id)
			if errT == nil && errU == nil {
				return &storage.Cursor{Time: t, ID: u}, nil
			}
		}
	}
	return nil, ErrBadCursor
}

// ParseTime reads the query parameter name's value raw as an RFC 3339 time; ""
// (the parameter absent) is nil. The error names the parameter.
func ParseTime(name, raw string) (*time.Time, error) {
	if raw == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return nil, fmt.Errorf("%s must be an RFC 3339 time", name)
	}
	return &t, nil
}

// DeadTask is a task as a dead-letter listing shows it (the API's and the
// dashboard's). Its DiedAt hides wire.Task's, which is omitted when nil:
// died_at is always present here, null or not.
type DeadTask struct {
	wire.Task
	DiedAt *time.Time `json:"died_at"`
}

// Dead is t, a dead task, as a dead-letter listing shows it.
func Dead(t storage.Task) DeadTask {
	return DeadTask{Task: Task(t), DiedAt: t.FinishedAt}
}
