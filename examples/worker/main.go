// Command worker runs a handler for the "emails" queue of the TaskForge server at
// $TASKFORGE_URL (default http://127.0.0.1:8080) until SIGINT or SIGTERM, then
// shuts down gracefully.
package main

import (
	"cmp"
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/taskforge/taskforge/client"
)

func main() {
	c, err := client.New(cmp.Or(os.Getenv("TASKFORGE_URL"), client.DefaultURL))
	if err != nil {
		log.Fatal(err)
	}
	w := client.NewWorker(c, client.WorkerConfig{Concurrency: 4})
	w.Handle("emails", func(ctx context.Context, job *client.Job) error {
		var msg struct {
			To string `json:"to"`
		}
		if err := job.Decode(&msg); err != nil {
			return err // a payload that does not decode is dead-lettered, not retried
		}
		log.Printf("sending a welcome mail to %s (task %s, attempt %d)", msg.To, job.ID, job.Attempt)
		return nil // ack; an error would nack and retry
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
