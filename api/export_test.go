package api

import "context"

// SetAfterClaim makes s call f with the poll's request context after each claim
// commits, before the poll answers (for tests of what happens in between).
func SetAfterClaim(s *Server, f func(context.Context)) { s.afterClaim = f }
