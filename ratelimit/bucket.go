package ratelimit

import "math"

// Bucket is the reference model of the token bucket in lua/pop.lua, used to test the
// script: capacity Burst, refilled continuously at Rate tokens per second, starting
// full; a pop of n takes min(n, floor(tokens)) tokens.
type Bucket struct {
	Rate   float64
	Burst  int
	tokens float64
	lastUs int64
	primed bool
}

// Take advances the model to nowUs (microseconds) and takes up to n tokens,
// returning how many it took.
func (b *Bucket) Take(nowUs int64, n int) int {
	if !b.primed {
		b.tokens, b.lastUs, b.primed = float64(b.Burst), nowUs, true
	}
	elapsed := max(0, nowUs-b.lastUs)
	b.tokens = math.Min(float64(b.Burst), b.tokens+float64(elapsed)*b.Rate/1e6)
	b.lastUs = nowUs
	took := min(n, int(math.Floor(b.tokens)))
	if took < 0 {
		took = 0
	}
	b.tokens -= float64(took)
	return took
}
