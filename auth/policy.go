package auth

import (
	"net/http"
	"strings"
)

// Role is what a token may do.
type Role string

// Roles. An admin may do everything.
const (
	RoleProducer Role = "producer"
	RoleWorker   Role = "worker"
	RoleAdmin    Role = "admin"
	// Public marks routes anyone may call, with or without a token.
	Public Role = ""
)

// ValidRole reports whether r names a role a token may have.
func ValidRole(r string) bool {
	switch Role(r) {
	case RoleProducer, RoleWorker, RoleAdmin:
		return true
	}
	return false
}

// Rule is what a route requires.
type Rule struct {
	// Role is the role required (an admin satisfies any); Public needs none.
	Role Role
	// Queue: the route names a queue in its :name parameter, which a queue-restricted
	// token must be allowed.
	Queue bool
	// PollBody: the route is the worker poll, whose body lists the queues.
	PollBody bool
	// Page: a browser page; without credentials it redirects to the sign-in page
	// instead of answering 401.
	Page bool
	// Audit: an operator action, recorded in the audit log (package audit) once the
	// caller is authorized, whatever the outcome.
	Audit bool
}

// rules maps "METHOD route-pattern" (gin's FullPath) to what the route requires.
// A route missing here requires an admin (the middleware fails safe), and the
// authorization matrix test fails until it is added.
var rules = map[string]Rule{
	"GET /healthz": {Role: Public},
	"GET /readyz":  {Role: Public},
	// The API's contract holds no data; SDK generators fetch it without a token.
	"GET /openapi.json": {Role: Public},
	"GET /metrics":      {Role: RoleAdmin},

	"POST /queues":              {Role: RoleAdmin, Audit: true},
	"GET /queues":               {Role: RoleProducer},
	"GET /queues/:name":         {Role: RoleProducer, Queue: true},
	"PATCH /queues/:name":       {Role: RoleAdmin, Queue: true, Audit: true},
	"POST /queues/:name/pause":  {Role: RoleAdmin, Queue: true, Audit: true},
	"POST /queues/:name/resume": {Role: RoleAdmin, Queue: true, Audit: true},
	"DELETE /queues/:name":      {Role: RoleAdmin, Queue: true, Audit: true},
	"GET /queues/:name/stats":   {Role: RoleProducer, Queue: true},
	// A group's overrides are settings of its queue: admins change them, producers read.
	"GET /queues/:name/groups":           {Role: RoleProducer, Queue: true},
	"GET /queues/:name/groups/:group":    {Role: RoleProducer, Queue: true},
	"PUT /queues/:name/groups/:group":    {Role: RoleAdmin, Queue: true, Audit: true},
	"DELETE /queues/:name/groups/:group": {Role: RoleAdmin, Queue: true, Audit: true},
	"POST /queues/:name/tasks":           {Role: RoleProducer, Queue: true},
	"GET /queues/:name/tasks":            {Role: RoleProducer, Queue: true},
	"GET /queues/:name/tasks/:id":        {Role: RoleProducer, Queue: true},
	"DELETE /queues/:name/tasks/:id":     {Role: RoleProducer, Queue: true, Audit: true},
	"POST /queues/:name/tasks/batch":     {Role: RoleProducer, Queue: true},
	"POST /queues/:name/tasks/cancel":    {Role: RoleProducer, Queue: true, Audit: true},
	"GET /queues/:name/dlq":              {Role: RoleAdmin, Queue: true},
	"POST /queues/:name/dlq/replay":      {Role: RoleAdmin, Queue: true, Audit: true},
	"POST /queues/:name/dlq/:id/replay":  {Role: RoleAdmin, Queue: true, Audit: true},
	"DELETE /queues/:name/dlq/:id":       {Role: RoleAdmin, Queue: true, Audit: true},
	"DELETE /queues/:name/dlq":           {Role: RoleAdmin, Queue: true, Audit: true},

	"POST /workers/poll":            {Role: RoleWorker, PollBody: true},
	"POST /workers/heartbeat":       {Role: RoleWorker},
	"POST /workers/heartbeat/batch": {Role: RoleWorker},
	"POST /workers/ack":             {Role: RoleWorker},
	"POST /workers/ack/batch":       {Role: RoleWorker},
	"POST /workers/nack":            {Role: RoleWorker},
	"POST /workers/release":         {Role: RoleWorker},
	"GET /workers":                  {Role: RoleAdmin},
	"GET /audit":                    {Role: RoleAdmin},
	"GET /history":                  {Role: RoleAdmin},

	// Schedules name no queue in the path (their :name is the schedule's): admin only.
	"POST /schedules":               {Role: RoleAdmin, Audit: true},
	"GET /schedules":                {Role: RoleAdmin},
	"GET /schedules/:name":          {Role: RoleAdmin},
	"PATCH /schedules/:name":        {Role: RoleAdmin, Audit: true},
	"DELETE /schedules/:name":       {Role: RoleAdmin, Audit: true},
	"POST /schedules/:name/trigger": {Role: RoleAdmin, Audit: true},

	// Workflows span queues: the handlers check a queue-restricted token against
	// every queue a workflow names (submitting enqueues into each of them).
	"POST /workflows":       {Role: RoleProducer},
	"GET /workflows":        {Role: RoleProducer},
	"GET /workflows/:id":    {Role: RoleProducer},
	"DELETE /workflows/:id": {Role: RoleProducer, Audit: true},

	"POST /tokens":       {Role: RoleAdmin, Audit: true},
	"GET /tokens":        {Role: RoleAdmin},
	"DELETE /tokens/:id": {Role: RoleAdmin, Audit: true},

	"GET /admin":                      {Role: Public}, // a redirect to /admin/
	"GET /admin/":                     {Role: RoleAdmin, Page: true},
	"GET /admin/assets/*path":         {Role: Public}, // the page's code and styles; no data
	"GET /admin/events":               {Role: RoleAdmin},
	"GET /admin/api/queues/:name/dlq": {Role: RoleAdmin, Queue: true},
	// The dashboard's busiest-first group list; the API lists groups by name.
	"GET /admin/api/queues/:name/groups": {Role: RoleAdmin, Queue: true},
	"GET /admin/login":                   {Role: Public},
	"POST /admin/session":                {Role: Public}, // checks the token it is given
	"POST /admin/logout":                 {Role: Public},
}

// Audited returns the routes whose rule says Audit, as method → route pattern →
// true, for a lookup on the request path that allocates nothing.
func Audited() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for key, r := range rules {
		if !r.Audit {
			continue
		}
		method, route, _ := strings.Cut(key, " ")
		if out[method] == nil {
			out[method] = map[string]bool{}
		}
		out[method][route] = true
	}
	return out
}

// RuleFor returns the rule of the route (method and gin route pattern) and whether
// one is defined. Routes without a rule require an admin.
func RuleFor(method, route string) (Rule, bool) {
	if method == http.MethodHead {
		method = http.MethodGet
	}
	r, ok := rules[method+" "+route]
	if !ok {
		return Rule{Role: RoleAdmin}, false
	}
	return r, true
}

// allows reports whether a token of role have may call a route requiring need.
func allows(have, need Role) bool {
	return need == Public || have == RoleAdmin || have == need
}
