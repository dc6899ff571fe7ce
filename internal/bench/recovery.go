package bench

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/taskforge/taskforge/client"
)

// Server defaults E6 assumes for a variant that leaves them unset.
const (
	defaultLease     = 30 * time.Second
	defaultHeartbeat = 10 * time.Second
)

// holdMs is how long a victim's task would run: far longer than any step, so that
// only the kill ends it.
const holdMs = 3_600_000

// leaseSettle is how long after the kill the leases are read a second time: a
// heartbeat a victim sent just before it died may still be applied. Nothing
// observable marks the end of such a request, so this is a wait, not a poll.
const leaseSettle = 100 * time.Millisecond

// recovery runs one E6 step: victims hold a task in every slot, idle survivors
// poll, the victims are SIGKILLed, and the step measures how soon the survivors
// get the tasks after each abandoned lease expires.
func (r *runner) recovery(ctx context.Context, run int, v LeaseVariant) (res RecoveryResult, err error) {
	c := r.cfg.E6
	name := fmt.Sprintf("e6-%s-r%d", v.Name, run)
	label := fmt.Sprintf("e6 %s leases run %d", v.Name, run)
	res = RecoveryResult{Step: Step{Experiment: ExpRecovery, Run: run, LoadAvg: loadAvg()}, Variant: v,
		Victims: c.Victims, Survivors: c.Survivors}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%s: %w", label, err)
			res.Error = err.Error()
		}
	}()
	var env []string
	if v.LeaseTimeout > 0 {
		env = append(env, "TASKFORGE_LEASE_TIMEOUT="+v.LeaseTimeout.String())
	}
	if v.HeartbeatInterval > 0 {
		env = append(env, "TASKFORGE_HEARTBEAT_INTERVAL="+v.HeartbeatInterval.String())
	}
	if v.WatchdogInterval > 0 {
		env = append(env, "TASKFORGE_WATCHDOG_INTERVAL="+v.WatchdogInterval.String())
	}
	r.prog.update(true, "%s: starting serve", label)
	s, err := r.newStep(ctx, name, env, "")
	if err != nil {
		return res, err
	}
	defer s.close()
	res.Database, res.RedisPrefix = s.dbName, s.prefix
	// No backoff: the lag measured is the watchdog's, the dispatcher's and the
	// poll's, not a retry delay the queue asked for.
	zero := time.Duration(0)
	cctx, cancel := context.WithTimeout(ctx, opTimeout)
	_, err = s.api.CreateQueue(cctx, name, client.QueueSettings{BackoffBase: &zero, MaxRetries: client.Ptr(3)})
	cancel()
	if err != nil {
		return res, err
	}

	r.prog.update(true, "%s: starting victims", label)
	victims, victimIDs, err := s.startWorkers(ctx, c.Victims, "sleep", "victim")
	if err != nil {
		return res, err
	}
	m := c.Victims.Workers()
	res.Tasks = m
	ids, err := enqueueBatches(ctx, s.api, name, m, map[string]any{"ms": holdMs}, "")
	if err != nil {
		return res, fmt.Errorf("enqueue: %w", err)
	}
	if err := s.waitCount(ctx, "victims holding every task", countExecuting, []any{name}, m, stallTimeout, victims, nil); err != nil {
		return res, err
	}
	r.prog.update(true, "%s: starting survivors", label)
	survivors, _, err := s.startWorkers(ctx, c.Survivors, "noop", "survivor")
	if err != nil {
		return res, err
	}
	hb := cmp.Or(v.HeartbeatInterval, defaultHeartbeat)
	delay := time.Duration(r.rng.Int64N(int64(hb)))
	res.KillDelayMs = float64(delay.Microseconds()) / 1000
	r.prog.update(true, "%s: SIGKILL of the victims in %s", label, delay.Round(time.Millisecond))
	t := time.NewTimer(delay) // the seeded kill moment, within one heartbeat interval
	select {
	case <-ctx.Done():
		t.Stop()
		return res, ctx.Err()
	case <-t.C:
	}
	for _, p := range victims {
		p.kill()
	}
	var killedAt time.Time
	if err := s.pool.QueryRow(ctx, dbNow).Scan(&killedAt); err != nil {
		return res, err
	}
	type lease struct {
		attempt   int
		expires   time.Time
		heartbeat time.Time
	}
	readLeases := func() (map[string]lease, error) {
		rows, err := s.pool.Query(ctx, heldLeases, name, victimIDs)
		if err != nil {
			return nil, fmt.Errorf("read leases: %w", err)
		}
		defer rows.Close()
		out := map[string]lease{}
		for rows.Next() {
			var id string
			var l lease
			if err := rows.Scan(&id, &l.attempt, &l.expires, &l.heartbeat); err != nil {
				return nil, err
			}
			out[id] = l
		}
		return out, rows.Err()
	}
	leases, err := readLeases()
	if err != nil {
		return res, err
	}
	time.Sleep(leaseSettle)
	later, err := readLeases()
	if err != nil {
		return res, err
	}
	for id, l := range later {
		if prev, ok := leases[id]; !ok || l.expires.After(prev.expires) {
			res.LateHeartbeats++
			leases[id] = l
		}
	}
	if len(leases) != m {
		r.problemf("%s: the victims held %d of %d tasks when they were killed", label, len(leases), m)
	}
	var leaseLens []float64
	for _, l := range leases {
		leaseLens = append(leaseLens, l.expires.Sub(l.heartbeat).Seconds())
	}
	res.LeaseSeconds = median(leaseLens)

	leaseLen := cmp.Or(v.LeaseTimeout, defaultLease)
	started := time.Now()
	err = s.waitCount(ctx, "re-delivery", countTerminal, []any{name}, m, leaseLen+stallTimeout, survivors, func(n int) {
		r.prog.update(false, "%s: %d/%d re-delivered and done, %.0f s after the kill", label, n, m, time.Since(started).Seconds())
	})
	if err != nil {
		return res, err
	}

	rows, err := s.pool.Query(ctx, recoveryTimes, ids)
	if err != nil {
		return res, fmt.Errorf("read attempts: %w", err)
	}
	defer rows.Close()
	var reclaim, redeliver, fromKill []float64
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for rows.Next() {
		var id, status, a1Status, a2Status string
		var a1End, a2Start *time.Time
		if err := rows.Scan(&id, &status, &a1Status, &a1End, &a2Status, &a2Start); err != nil {
			return res, err
		}
		if status != client.StatusDone || a1Status != client.AttemptAbandoned || a2Status != client.AttemptSucceeded {
			if len(res.Bad) < 5 {
				res.Bad = append(res.Bad, fmt.Sprintf("%s: %s; attempt 1 %s, attempt 2 %q", id, status, a1Status, a2Status))
			}
			continue
		}
		res.HistoriesOK++
		l, ok := leases[id]
		if !ok || l.attempt != 1 || a1End == nil || a2Start == nil {
			continue
		}
		reclaim = append(reclaim, ms(a1End.Sub(l.expires)))
		redeliver = append(redeliver, ms(a2Start.Sub(l.expires)))
		fromKill = append(fromKill, ms(a2Start.Sub(killedAt)))
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	res.ExpiryToReclaim, res.ExpiryToRedelivery, res.KillToRedelivery = distOf(reclaim), distOf(redeliver), distOf(fromKill)
	if res.HistoriesOK != m {
		r.problemf("%s: %d of %d histories are not abandoned-then-succeeded, e.g. %v", label, m-res.HistoriesOK, m, res.Bad)
	}
	r.prog.println(fmt.Sprintf("%s: %d tasks; lease expiry → re-delivery p50 %.0f ms, max %.0f ms; kill → re-delivery p50 %.0f ms (load %.2f)",
		label, m, res.ExpiryToRedelivery.P50, res.ExpiryToRedelivery.Max, res.KillToRedelivery.P50, res.LoadAvg[0]))
	return res, nil
}
