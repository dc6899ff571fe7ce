package main

import "runtime/debug"

// serveGCPercent is the garbage collector's target for serve when GOGC is not
// set: the heap may grow to five times what is live between collections, rather
// than Go's default twice. Serve's live heap is small (tens of MB) and churns with
// every request, so at Go's default it collected all the time: with batched
// workers (E1 16x50 and 100x50), serve's CPU per task fell 25–35 % at 400, in four
// alternated pairs, and its peak RSS rose from 59 to 83 MB. GOGC (and GOMEMLIMIT)
// in the environment still win.
const serveGCPercent = 400

// applyServeGC sets serveGCPercent unless getenv finds GOGC set.
func applyServeGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
}
