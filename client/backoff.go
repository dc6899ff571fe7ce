package client

import (
	"math/rand/v2"
	"time"
)

// backoff yields jittered, exponentially growing delays between min and max:
// each delay is drawn from [d/2, d] where d doubles from min up to max.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(min, max time.Duration) *backoff { return &backoff{min: min, max: max} }

// next returns the delay before the next try.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	half := b.cur / 2
	return half + rand.N(b.cur-half+1)
}

// reset starts over from min after a success.
func (b *backoff) reset() { b.cur = 0 }
