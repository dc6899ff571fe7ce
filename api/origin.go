package api

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
)

// CodeCrossOrigin is the error code of a refused cross-site request.
const CodeCrossOrigin = "cross_origin_request"

// crossOriginGuard refuses (403) every state-changing request (any method but GET,
// HEAD and OPTIONS) that a browser marks as cross-site: Sec-Fetch-Site is neither
// same-origin nor none, or, from browsers too old to send it, the Origin's host
// differs from Host. Requests without those headers (curl, the SDK, workers) are not
// browser requests and pass. So no other web page can make an operator's browser
// replay, cancel or pause anything through the dashboard's session with the API.
// trusted origins ("https://ops.example.com") are let through, for a reverse proxy
// that rewrites Host.
func (s *Server) crossOriginGuard(trusted []string) (gin.HandlerFunc, error) {
	cop := http.NewCrossOriginProtection()
	for _, o := range trusted {
		if err := cop.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("trusted origin %q: %w", o, err)
		}
	}
	return func(c *gin.Context) {
		if err := cop.Check(c.Request); err != nil {
			s.fail(c, &Error{Status: http.StatusForbidden, Code: CodeCrossOrigin,
				Message: "cross-origin state-changing requests are refused; send them from the dashboard's own origin, or without browser Origin headers"})
			return
		}
		c.Next()
	}, nil
}
