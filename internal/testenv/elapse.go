package testenv

import "time"

// Elapse lets d of real time pass (none when d <= 0). It is for the few waits in
// which elapsed time is itself what the test is about, so that no event can stand
// for it: a fault schedule (when a fault strikes, how long a process stays dead,
// paused or cut off), a measurement window, the pace of a load generator or a
// sampler, a simulated task's work, and the pause before retrying through another
// process's outage, whose end sends this process nothing. Every caller says which.
// A test that waits for something to happen waits on its signal instead
// (package testsignal); Elapse is never synchronisation.
func Elapse(d time.Duration) {
	if d > 0 {
		time.Sleep(d) // elapsed time is the point (see above): no signal serves
	}
}
