// Package client is the Go SDK of TaskForge: a Client for every endpoint of the
// HTTP API, and a Worker runtime that runs handlers for the tasks of a queue.
//
// # Producer
//
//	c, err := client.New("http://127.0.0.1:8080")
//	if err != nil {
//		log.Fatal(err)
//	}
//	task, err := c.Enqueue(ctx, "emails", client.NewTask{
//		Payload:        map[string]string{"to": "ada@example.com"},
//		IdempotencyKey: "welcome-ada",
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	fmt.Println("enqueued", task.ID)
//
// # Worker
//
//	c, _ := client.New("http://127.0.0.1:8080")
//	w := client.NewWorker(c, client.WorkerConfig{Concurrency: 8})
//	w.Handle("emails", func(ctx context.Context, job *client.Job) error {
//		var msg struct{ To string }
//		if err := job.Decode(&msg); err != nil {
//			return err // permanent: a bad payload is dead-lettered, not retried
//		}
//		return send(ctx, msg.To) // nil acks; an error nacks and retries
//	})
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	log.Fatal(w.Run(ctx)) // returns nil after a graceful shutdown
//
// # Errors
//
// An error response of the API is an *APIError{Status, Code, Message}; errors.Is
// matches it against the sentinel of its code: ErrQueueNotFound, ErrQueueExists,
// ErrQueueNotEmpty, ErrTaskNotFound, ErrTaskNotCancellable, ErrIdempotencyConflict,
// ErrLeaseLost, ErrInvalidRequest, ErrPayloadTooLarge, ErrUnavailable, ErrInternal.
// A request that got no answer at all (connection refused, reset) matches
// ErrUnavailable too. Client methods never retry; the Worker does.
//
// # Handler outcomes
//
// A handler returns nil to ack (Job.SetResult records a result), an error to nack
// and retry after the queue's backoff, Permanent(err) to dead-letter at once, or
// RetryAfter(err, d) to retry after d. A panic is recovered and nacked, retryable,
// with its stack as the attempt's error. The handler's context is cancelled when
// the task is cancelled (cause ErrTaskCancelled), the lease is lost (ErrLeaseLost),
// the task's timeout passes, or a shutdown's grace period ends (ErrWorkerStopping).
//
// # Delivery
//
// Delivery is at least once: a task whose worker crashes, hangs or is cut off is
// run again once its lease expires. Job.Attempt grows with every attempt and can
// fence side effects; the idempotency of the handler's effects is the caller's.
package client
