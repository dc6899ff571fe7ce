// Package scheduler fires schedules (cron): one task per tick, exactly once, whatever
// the number of replicas running it and their crashes and restarts.
//
// It owns the schedules' cadence: parsing cron expressions and time zones (Parse,
// Next), deciding which tick a due schedule fires and when it next fires (PlanFrom:
// missed ticks collapse into the most recent one; a local time that daylight saving
// skips is skipped, one it repeats fires once), and the loop (Scheduler.Run) that every
// replica runs. The loop asks its Firer (package lifecycle, which owns the transition
// end to end, as for a manual trigger) to fire the most overdue schedule: the statement
// claims it with FOR UPDATE SKIP LOCKED and, in that schedule's own transaction,
// enqueues the tick's task (scheduled_at = the tick, an idempotency key derived from
// the schedule and the tick) and advances next_run_at (storage.FireDueSchedule); the
// lifecycle then tells the dispatcher and records the transition. Between passes the
// loop sleeps until the earliest tick (one indexed query), at most MaxWait, or until
// Wake.
//
// The scheduler never keeps state another replica would need, never enqueues outside
// the transaction that advances the schedule, never changes a task once enqueued (the
// dispatcher and the claim own it from there), and never visits schedules that are not
// due: its costs follow the ticks, not the number of schedules.
package scheduler
