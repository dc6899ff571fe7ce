package auth

import (
	_ "embed"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/taskforge/taskforge/dashboard"
)

//go:embed login.html
var loginHTML string

var loginPage = template.Must(template.New("login").Parse(loginHTML))

// signInBodyLimit bounds the sign-in form.
const signInBodyLimit = 4 << 10

func (g *Guard) mountSession(e *gin.Engine) {
	grp := e.Group("/admin", pageHeaders)
	grp.GET("/login", g.loginForm)
	grp.POST("/session", g.signIn)
	grp.POST("/logout", g.signOut)
}

// pageHeaders gives the sign-in routes the dashboard's CSP and companions.
func pageHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", dashboard.CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	c.Next()
}

func (g *Guard) renderLogin(c *gin.Context, status int, msg string) {
	open := false
	if s, err := g.current(c); err == nil {
		open = !s.enabled
	}
	c.Status(status)
	c.Header("Content-Type", "text/html; charset=utf-8")
	if err := loginPage.Execute(c.Writer, struct {
		Open  bool
		Error string
	}{open, msg}); err != nil {
		g.log.Warn("render sign-in page", "err", err)
	}
}

func (g *Guard) loginForm(c *gin.Context) { g.renderLogin(c, http.StatusOK, "") }

// secureRequest reports whether the browser reached us over HTTPS (directly or
// through a TLS-terminating proxy), so the cookie can be marked Secure.
func secureRequest(c *gin.Context) bool {
	return c.Request.TLS != nil || strings.EqualFold(c.GetHeader("X-Forwarded-Proto"), "https")
}

func setSessionCookie(c *gin.Context, value string, maxAge int) {
	http.SetCookie(c.Writer, &http.Cookie{Name: SessionCookie, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: secureRequest(c), SameSite: http.SameSiteStrictMode})
}

// signIn takes an admin token from the sign-in form and starts a session. The
// cookie carries a fresh session secret, never the token.
func (g *Guard) signIn(c *gin.Context) {
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, signInBodyLimit)
	tok := strings.TrimSpace(c.PostForm("token"))
	hash, ok := parseSecret(TokenPrefix, tok)
	var p *Principal
	enabled := true
	if ok {
		var err error
		if p, enabled, err = g.lookup(c, hash, false); err != nil {
			g.renderLogin(c, http.StatusServiceUnavailable, "Cannot check the token now; retry in a moment.")
			return
		}
	}
	if !enabled {
		c.Redirect(http.StatusSeeOther, "/admin/")
		return
	}
	if p == nil || p.expired(g.now()) || p.Role != RoleAdmin {
		g.renderLogin(c, http.StatusUnauthorized, "That is not a valid admin token.")
		return
	}
	secret, sh := newSecret(sessionPrefix)
	until, err := g.store.CreateSession(c, p.TokenID, sh[:], g.cfg.SessionTTL)
	if err != nil {
		g.log.Warn("create dashboard session", "err", err)
		g.renderLogin(c, http.StatusUnauthorized, "That is not a valid admin token.")
		return
	}
	g.invalidate()
	setSessionCookie(c, secret, max(1, int(time.Until(until).Seconds())))
	c.Redirect(http.StatusSeeOther, "/admin/")
}

// signOut ends the session (server side too) and clears the cookie.
func (g *Guard) signOut(c *gin.Context) {
	if ck, err := c.Cookie(SessionCookie); err == nil {
		if hash, ok := parseSecret(sessionPrefix, ck); ok {
			if err := g.store.DeleteSession(c, hash[:]); err != nil {
				g.log.Warn("delete dashboard session", "err", err)
			}
			g.invalidate()
		}
	}
	setSessionCookie(c, "", -1)
	c.Redirect(http.StatusSeeOther, "/admin/login")
}
