package buffer

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// maxDonePerMessage bounds the ids one done message carries (37 bytes each), so a
// bulk cancel of a million tasks publishes many small messages, not one huge one.
const maxDonePerMessage = 500

// DoneChannel is the pub/sub channel announcing tasks that became terminal (done,
// dead or cancelled), as comma-separated task ids. Like the wake channel it is a hint:
// a message lost to a reconnect delays a waiter until its deadline, nothing more.
func (b *Buffer) DoneChannel() string { return b.prefix + ":done" }

// PublishDone tells every replica that the tasks ids became terminal.
func (b *Buffer) PublishDone(ctx context.Context, ids ...uuid.UUID) error {
	for len(ids) > 0 {
		n := min(len(ids), maxDonePerMessage)
		var sb strings.Builder
		for i, id := range ids[:n] {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(id.String())
		}
		if err := b.rdb.Publish(ctx, b.DoneChannel(), sb.String()).Err(); err != nil {
			return fmt.Errorf("announce %d finished tasks: %w", len(ids), err)
		}
		ids = ids[n:]
	}
	return nil
}

// ParseDone reads the task ids of a done message, skipping any that is not a UUID.
func ParseDone(payload string) []uuid.UUID {
	parts := strings.Split(payload, ",")
	out := make([]uuid.UUID, 0, len(parts))
	for _, p := range parts {
		if id, err := uuid.Parse(p); err == nil {
			out = append(out, id)
		}
	}
	return out
}
