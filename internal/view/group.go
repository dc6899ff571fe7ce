package view

import (
	"math"

	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/storage"
)

// Group is group g of queue q as the API shows it: its overrides, the settings in
// effect (the overrides, else the queue's group defaults; the burst of a rate
// defaults to its ceiling) and its counts.
func Group(q storage.Queue, g storage.Group) wire.Group {
	eff := wire.GroupLimits{Weight: 1, MaxConcurrency: q.GroupMaxConcurrency, RateLimit: q.GroupRateLimit, RateBurst: q.GroupRateBurst}
	if w := g.Settings.Weight; w != nil {
		eff.Weight = *w
	}
	if c := g.Settings.MaxConcurrency; c != nil {
		eff.MaxConcurrency = c
	}
	if r := g.Settings.RateLimit; r != nil {
		eff.RateLimit, eff.RateBurst = r, nil
	}
	if b := g.Settings.RateBurst; b != nil {
		eff.RateBurst = b
	}
	switch {
	case eff.RateLimit == nil:
		eff.RateBurst = nil
	case eff.RateBurst == nil:
		burst := max(1, int(math.Ceil(*eff.RateLimit)))
		eff.RateBurst = &burst
	}
	c := g.Counts
	return wire.Group{Group: g.Name, GroupSettings: wire.GroupSettings(g.Settings), Effective: eff,
		GroupCounts: wire.GroupCounts{Pending: c.Pending, Blocked: c.Blocked, Claimed: c.Claimed,
			Executing: c.Executing, Retry: c.Retry, Dead: c.Dead}}
}
