package clienttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/taskforge/taskforge/client"
)

func ptr[T any](v T) *T { return &v }

func TestScheduleMethods(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	if _, err := c.CreateQueue(ctx, "reports", client.QueueSettings{}); err != nil {
		t.Fatal(err)
	}
	created, err := c.CreateSchedule(ctx, "nightly", client.ScheduleSettings{
		Queue: ptr("reports"), Cron: ptr("30 2 * * *"), Timezone: ptr("America/New_York"),
		Payload: map[string]any{"kind": "nightly"}, Priority: ptr(2), MaxRetries: client.Set(1)})
	if err != nil {
		t.Fatal(err)
	}
	if created.Timezone != "America/New_York" || created.Priority != 2 || created.MaxRetries == nil || *created.MaxRetries != 1 ||
		created.NextRunAt == nil || created.Paused {
		t.Fatalf("created: %+v", created)
	}
	if _, err := c.CreateSchedule(ctx, "nightly", client.ScheduleSettings{Queue: ptr("reports"), Cron: ptr("@daily"), Payload: 1}); !errors.Is(err, client.ErrScheduleExists) {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := c.CreateSchedule(ctx, "bad", client.ScheduleSettings{Queue: ptr("reports"), Cron: ptr("nope"), Payload: 1}); !errors.Is(err, client.ErrInvalidRequest) {
		t.Fatalf("bad cron: %v", err)
	}
	if _, err := c.CreateSchedule(ctx, "lost", client.ScheduleSettings{Queue: ptr("nope"), Cron: ptr("@daily"), Payload: 1}); !errors.Is(err, client.ErrQueueNotFound) {
		t.Fatalf("unknown queue: %v", err)
	}
	list, err := c.ListSchedules(ctx, "reports")
	if err != nil || len(list) != 1 || list[0].Name != "nightly" {
		t.Fatalf("list: %v %v", list, err)
	}
	if list, err := c.ListSchedules(ctx, "elsewhere"); err != nil || len(list) != 0 {
		t.Fatalf("list of another queue: %v %v", list, err)
	}
	paused, err := c.UpdateSchedule(ctx, "nightly", client.ScheduleSettings{Paused: ptr(true), MaxRetries: client.Null[int]()})
	if err != nil || !paused.Paused || paused.NextRunAt != nil || paused.MaxRetries != nil {
		t.Fatalf("pause: %+v %v", paused, err)
	}
	task, err := c.TriggerSchedule(ctx, "nightly")
	if err != nil || task.Schedule == nil || *task.Schedule != "nightly" || task.Queue != "reports" {
		t.Fatalf("trigger: %+v %v", task, err)
	}
	var payload map[string]string
	if err := json.Unmarshal(task.Payload, &payload); err != nil || payload["kind"] != "nightly" {
		t.Fatalf("triggered payload %s", task.Payload)
	}
	got, err := c.GetSchedule(ctx, "nightly")
	if err != nil || got.LastTaskID == nil || *got.LastTaskID != task.ID {
		t.Fatalf("get: %+v %v", got, err)
	}
	if err := c.DeleteQueue(ctx, "reports"); !errors.Is(err, client.ErrQueueNotEmpty) {
		t.Fatalf("delete of a scheduled queue: %v", err)
	}
	if err := c.DeleteSchedule(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSchedule(ctx, "nightly"); !errors.Is(err, client.ErrScheduleNotFound) {
		t.Fatalf("deleted: %v", err)
	}
	if _, err := c.TriggerSchedule(ctx, "nightly"); !errors.Is(err, client.ErrScheduleNotFound) {
		t.Fatalf("trigger deleted: %v", err)
	}
}
