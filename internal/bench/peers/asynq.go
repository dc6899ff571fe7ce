package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// asynqQueue is the queue every Asynq workload uses.
const asynqQueue = "peers"

// asynqSys runs Asynq with its fast setting: TaskCheckInterval 1 ms.
type asynqSys struct {
	opt    asynq.RedisClientOpt
	rdb    *redis.Client
	client *asynq.Client
}

func newAsynq(ctx context.Context, addr string) (*asynqSys, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	keys, err := rdb.Keys(ctx, "asynq:*").Result()
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	if len(keys) > 0 {
		return nil, fmt.Errorf("redis %s already holds %d asynq:* keys; the run deletes its keys after, so it needs a Redis without them", addr, len(keys))
	}
	opt := asynq.RedisClientOpt{Addr: addr, PoolSize: 120}
	return &asynqSys{opt: opt, rdb: rdb, client: asynq.NewClient(opt)}, nil
}

// Close deletes every key Asynq wrote.
func (s *asynqSys) Close(ctx context.Context) error {
	_ = s.client.Close()
	defer s.rdb.Close()
	keys, err := s.rdb.Keys(ctx, "asynq:*").Result()
	if err != nil {
		return err
	}
	if len(keys) > 0 {
		return s.rdb.Del(ctx, keys...).Err()
	}
	return nil
}

// reset deletes the queue's keys. (Inspector.DeleteQueue is no help: after it, a
// client that already enqueued to the queue does not register it again, so the
// next DeleteQueue finds no queue while its tasks remain.)
func (s *asynqSys) reset(ctx context.Context) error {
	keys, err := s.rdb.Keys(ctx, "asynq:{"+asynqQueue+"}:*").Result()
	if err != nil || len(keys) == 0 {
		return err
	}
	return s.rdb.Del(ctx, keys...).Err()
}

func (s *asynqSys) server(workers int, h asynq.HandlerFunc) (*asynq.Server, error) {
	srv := asynq.NewServer(s.opt, asynq.Config{Concurrency: workers, Queues: map[string]int{asynqQueue: 1},
		TaskCheckInterval: time.Millisecond, Logger: quietAsynqLogger{}, LogLevel: asynq.ErrorLevel})
	return srv, srv.Start(h)
}

// enqueueAll enqueues n tasks from one client shared by 16 goroutines: Asynq
// has no batch enqueue, so this is its fastest way to fill a queue.
func (s *asynqSys) enqueueAll(ctx context.Context, n int, payload []byte) error {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	per := (n + 15) / 16
	for g := 0; g < 16; g++ {
		m := min(per, n-g*per)
		if m <= 0 {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < m; i++ {
				if _, err := s.client.EnqueueContext(ctx, asynq.NewTask("bench", payload), asynq.Queue(asynqQueue), asynq.MaxRetry(0)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (s *asynqSys) Drain(ctx context.Context, n, workers int, sleep time.Duration) (float64, error) {
	if err := s.reset(ctx); err != nil {
		return 0, err
	}
	if err := s.enqueueAll(ctx, n, nil); err != nil {
		return 0, err
	}
	sp := newSpan(n)
	srv, err := s.server(workers, func(context.Context, *asynq.Task) error {
		sp.start()
		if sleep > 0 {
			time.Sleep(sleep)
		}
		sp.end()
		return nil
	})
	if err != nil {
		return 0, err
	}
	defer srv.Shutdown()
	return sp.wait(ctx)
}

func (s *asynqSys) Preload(ctx context.Context, n int) (float64, error) {
	if err := s.reset(ctx); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := s.enqueueAll(ctx, n, nil); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

func (s *asynqSys) Latency(ctx context.Context, n, workers int, rate float64) ([]time.Duration, error) {
	if err := s.reset(ctx); err != nil {
		return nil, err
	}
	l := newLatencies(n)
	srv, err := s.server(workers, func(_ context.Context, t *asynq.Task) error {
		var at int64
		if err := json.Unmarshal(t.Payload(), &at); err != nil {
			return fmt.Errorf("latency task payload %q: %w", t.Payload(), err)
		}
		l.received(time.Unix(0, at))
		return nil
	})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	if err := pace(ctx, n, rate, func() error {
		b, _ := json.Marshal(time.Now().UnixNano())
		_, err := s.client.EnqueueContext(ctx, asynq.NewTask("bench", b), asynq.Queue(asynqQueue), asynq.MaxRetry(0))
		return err
	}); err != nil {
		return nil, err
	}
	return l.wait(ctx)
}

func (s *asynqSys) RoundTrips(ctx context.Context, n int) ([]time.Duration, error) {
	if err := s.reset(ctx); err != nil {
		return nil, err
	}
	return timeEach(n, func() error {
		_, err := s.client.EnqueueContext(ctx, asynq.NewTask("bench", nil), asynq.Queue(asynqQueue), asynq.MaxRetry(0))
		return err
	})
}
