// Command producer enqueues a task into the "emails" queue of the TaskForge server
// at $TASKFORGE_URL (default http://127.0.0.1:8080), creating the queue if needed.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/taskforge/taskforge/client"
)

func main() {
	ctx := context.Background()
	c, err := client.New(cmp.Or(os.Getenv("TASKFORGE_URL"), client.DefaultURL))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.CreateQueue(ctx, "emails", client.QueueSettings{}); err != nil && !errors.Is(err, client.ErrQueueExists) {
		log.Fatal(err)
	}
	task, err := c.Enqueue(ctx, "emails", client.NewTask{
		Payload:        map[string]string{"to": "ada@example.com"},
		IdempotencyKey: "welcome-ada", // running this twice enqueues once
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("enqueued", task.ID)
}
