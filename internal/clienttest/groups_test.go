package clienttest_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/taskforge/taskforge/client"
)

// TestGroups: the Go SDK sets a queue's fairness and group defaults, enqueues
// with a group and reads it back, and puts, gets, lists and deletes a group's
// overrides; a group with nothing is ErrGroupNotFound.
func TestGroups(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	q := must[*client.Queue](t)(c.CreateQueue(ctx, "fair", client.QueueSettings{Paused: client.Ptr(true),
		Fairness: client.Set("round_robin"), GroupMaxConcurrency: client.Set(4)}))
	if q.Fairness == nil || *q.Fairness != "round_robin" || q.GroupMaxConcurrency == nil || *q.GroupMaxConcurrency != 4 {
		t.Fatalf("queue: %+v", q)
	}
	task := must[*client.Task](t)(c.Enqueue(ctx, "fair", client.NewTask{Payload: 1, Group: "acme"}))
	if task.Group == nil || *task.Group != "acme" {
		t.Fatalf("task: group %v", task.Group)
	}
	must[*client.Task](t)(c.Enqueue(ctx, "fair", client.NewTask{Payload: 2, Group: "beta"}))
	tasks := must[*client.TaskPage](t)(c.ListTasks(ctx, "fair", client.TaskFilter{Group: "acme"}))
	if len(tasks.Tasks) != 1 || tasks.Tasks[0].ID != task.ID {
		t.Fatalf("tasks of acme: %+v", tasks.Tasks)
	}
	g := must[*client.Group](t)(c.PutGroup(ctx, "fair", "acme", client.GroupSettings{Weight: client.Ptr(3)}))
	if *g.Weight != 3 || g.Effective.Weight != 3 || *g.Effective.MaxConcurrency != 4 || g.Pending != 1 {
		t.Fatalf("put: %+v", g)
	}
	g = must[*client.Group](t)(c.GetGroup(ctx, "fair", "acme"))
	if *g.Weight != 3 || g.Pending != 1 {
		t.Fatalf("get: %+v", g)
	}
	page := must[*client.GroupPage](t)(c.ListGroups(ctx, "fair", client.GroupFilter{Active: true, Limit: 10}))
	if len(page.Groups) != 2 || page.Groups[0].Group != "acme" || page.NextCursor != "" {
		t.Fatalf("list: %+v", page)
	}
	if err := c.DeleteGroup(ctx, "fair", "acme"); err != nil {
		t.Fatal(err)
	}
	if g = must[*client.Group](t)(c.GetGroup(ctx, "fair", "acme")); g.Weight != nil {
		t.Fatalf("after delete: %+v", g)
	}
	if _, err := c.GetGroup(ctx, "fair", "nobody"); !errors.Is(err, client.ErrGroupNotFound) {
		t.Fatalf("nobody: %v", err)
	}
	_, err := c.PutGroup(ctx, "fair", "acme", client.GroupSettings{Weight: client.Ptr(0)})
	wantErr(t, err, http.StatusBadRequest, client.ErrInvalidRequest)
}
