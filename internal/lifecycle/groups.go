package lifecycle

import (
	"context"
	"fmt"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/storage"
)

// groupMirror is what a change of a group's overrides needs of Redis: the fair pop
// reads the overrides from a hash that mirrors queue_groups (buffer.SetGroup).
// *buffer.Buffer implements it; a Broker without it (a test's fake) mirrors
// nothing.
type groupMirror interface {
	SetGroup(ctx context.Context, queue, group string, s buffer.GroupSettings) error
}

var _ groupMirror = (*buffer.Buffer)(nil)

// PutGroup stores group's overrides of queue's group defaults in PostgreSQL, then
// mirrors them into Redis, so that the next pop of any replica applies them, and
// returns the queue with the group. When the mirror fails the change is stored but
// the error is returned: the request may be repeated, and the dispatcher mirrors
// every override again after Redis lost its data.
func (l *Lifecycle) PutGroup(ctx context.Context, queue, group string, set storage.GroupSettings) (storage.Queue, storage.Group, error) {
	g, err := l.store.PutGroup(ctx, queue, group, set)
	if err != nil {
		return storage.Queue{}, storage.Group{}, err
	}
	q, err := l.store.GetQueue(ctx, queue)
	if err != nil {
		return storage.Queue{}, storage.Group{}, err
	}
	if err := l.mirrorGroup(ctx, queue, group, set); err != nil {
		return storage.Queue{}, storage.Group{}, err
	}
	return q, g, nil
}

// DeleteGroup forgets group's overrides in PostgreSQL, then in Redis (the group
// takes the queue's defaults again); its tasks stay.
func (l *Lifecycle) DeleteGroup(ctx context.Context, queue, group string) error {
	if err := l.store.DeleteGroup(ctx, queue, group); err != nil {
		return err
	}
	return l.mirrorGroup(ctx, queue, group, storage.GroupSettings{})
}

func (l *Lifecycle) mirrorGroup(ctx context.Context, queue, group string, set storage.GroupSettings) error {
	m, ok := l.buf.(groupMirror)
	if !ok {
		return nil
	}
	s := buffer.GroupSettings{Weight: set.Weight, MaxConcurrency: set.MaxConcurrency, Rate: set.RateLimit, Burst: set.RateBurst}
	if err := m.SetGroup(ctx, queue, group, s); err != nil {
		return fmt.Errorf("mirror the overrides of group %q of %s: %w", group, queue, err)
	}
	return nil
}
