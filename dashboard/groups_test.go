package dashboard_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/internal/testserver"
)

// groupPage is GET /admin/api/queues/:name/groups's answer.
type groupPage struct {
	Groups     []wire.Group `json:"groups"`
	NextCursor *string      `json:"next_cursor"`
}

// TestBusyGroupsListing: the dashboard's group list comes busiest first, then by
// name, a page at a time; bad limits and cursors are 400, an unknown queue 404.
func TestBusyGroupsListing(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", map[string]any{"fairness": "round_robin", "paused": true, "group_max_concurrency": 2})
	var tasks []map[string]any
	for g, n := range map[string]int{"a": 1, "b": 3, "c": 2, "d": 3} {
		for range n {
			tasks = append(tasks, map[string]any{"payload": 1, "group": g})
		}
	}
	s.Must(http.StatusCreated, "POST", "/queues/q/tasks/batch", map[string]any{"tasks": tasks})
	s.Must(http.StatusOK, "PUT", "/queues/q/groups/d", map[string]any{"weight": 4})

	var got []string
	var page groupPage
	testserver.Eventually(t, 10*time.Second, "the fold to count every group", func() bool {
		page = groupPage{}
		s.Must(http.StatusOK, "GET", "/admin/api/queues/q/groups?limit=3", nil).JSON(t, &page)
		return len(page.Groups) == 3 && page.Groups[0].Group == "b" && page.Groups[1].Group == "d" && page.Groups[2].Group == "c"
	})
	if page.NextCursor == nil || page.Groups[1].Weight == nil || page.Groups[1].Effective.Weight != 4 ||
		*page.Groups[0].Effective.MaxConcurrency != 2 || page.Groups[0].Pending != 3 {
		t.Fatalf("first page: %+v", page)
	}
	for _, g := range page.Groups {
		got = append(got, g.Group)
	}
	cursor := *page.NextCursor
	page = groupPage{}
	s.Must(http.StatusOK, "GET", "/admin/api/queues/q/groups?limit=3&cursor="+cursor, nil).JSON(t, &page)
	for _, g := range page.Groups {
		got = append(got, g.Group)
	}
	if fmt.Sprint(got) != "[b d c a]" || page.NextCursor != nil {
		t.Fatalf("busiest first over two pages: %v, next %v", got, page.NextCursor)
	}
	for _, bad := range []string{"limit=0", "limit=501", "limit=x", "cursor=!!!", "cursor=bm9wZQ"} {
		if r := s.Do("GET", "/admin/api/queues/q/groups?"+bad, nil); r.Status != http.StatusBadRequest || r.ErrorCode(t) != "invalid_request" {
			t.Errorf("?%s: %d %s", bad, r.Status, r.Body)
		}
	}
	if r := s.Do("GET", "/admin/api/queues/nope/groups", nil); r.Status != http.StatusNotFound || r.ErrorCode(t) != "queue_not_found" {
		t.Errorf("unknown queue: %d %s", r.Status, r.Body)
	}
}

// The Groups panel, reached from the overview's row of a fair queue, lists the
// groups busiest first, pages with Load more, and follows new work live: a group
// that becomes the busiest moves to the top without a reload.
func testGroupsBusiestFirstLive(t *testing.T, e *env) {
	s := e.srv
	s.CreateQueue("tenants", map[string]any{"fairness": "round_robin", "paused": true})
	s.CreateQueue("plain", nil)
	tasks := []map[string]any{
		{"payload": 1, "group": "acme"}, {"payload": 2, "group": "acme"}, {"payload": 3, "group": "acme"},
		{"payload": 4, "group": "beta"},
	}
	for i := range 55 { // more groups than a page
		tasks = append(tasks, map[string]any{"payload": i, "group": fmt.Sprintf("small-%02d", i)})
	}
	s.Must(http.StatusCreated, "POST", "/queues/tenants/tasks/batch", map[string]any{"tasks": tasks})

	page := e.open("#/overview")
	page.waitJS(`!!document.querySelector('#queues tr[data-queue="plain"]')`, "the plain row")
	if !eval[bool](page, `document.querySelector('#queues tr[data-queue="plain"] a[data-action="groups"]').hidden`) {
		t.Error("a plain queue's row links to groups")
	}
	page.click(`#queues tr[data-queue="tenants"] a[data-action="groups"]`)
	first := `document.querySelector('#group-list tbody tr')`
	page.waitJS(first+`?.dataset.group === 'acme' && `+first+`.querySelector('td[data-col="pending"]').textContent === '3'`, "acme first")
	page.waitJS(`document.querySelectorAll('#group-list tbody tr')[1]?.dataset.group === 'beta'`, "beta second")
	page.waitJS(`document.querySelectorAll('#group-list tbody tr').length === 50 && !document.querySelector('#groups-more').hidden`, "one page and Load more")
	page.click(`#groups-more`)
	page.waitJS(`document.querySelectorAll('#group-list tbody tr').length === 57 && document.querySelector('#groups-more').hidden`, "every group")

	more := make([]map[string]any, 5)
	for i := range more {
		more[i] = map[string]any{"payload": i, "group": "beta"}
	}
	s.Must(http.StatusCreated, "POST", "/queues/tenants/tasks/batch", map[string]any{"tasks": more})
	page.waitJSFor(first+`?.dataset.group === 'beta' && `+first+`.querySelector('td[data-col="pending"]').textContent === '6'`, "beta first, live", 15*time.Second)
	page.waitJS(`document.querySelectorAll('#group-list tbody tr').length === 57`, "every group still shown")

	// The task inspector filters by group and shows a task's group.
	var list struct {
		Tasks []struct {
			ID string `json:"id"`
		} `json:"tasks"`
	}
	s.Must(http.StatusOK, "GET", "/queues/tenants/tasks?group=beta&limit=1", nil).JSON(t, &list)
	page.do(navigateHash("#/tasks?queue=tenants&group=beta&task=" + list.Tasks[0].ID))
	page.waitJS(`document.querySelectorAll('#task-list tbody tr').length === 6 && document.getElementById('f-group').value === 'beta'`, "beta's six tasks")
	page.waitJS(`[...document.querySelectorAll('#task-detail dt')].some((dt) => dt.textContent === 'Group' && dt.nextElementSibling.textContent === 'beta')`, "the task's group")
	page.checkClean()
}

// A group's overrides are edited from its row of the Groups panel: Edit fills the
// form with the group's own values (empty: the queue's default), Save sends them
// with PUT /queues/:name/groups/:group and the row marks them as the group's own,
// live; a value the API refuses shows the API's message and changes nothing.
func testEditGroupOverrides(t *testing.T, e *env) {
	s := e.srv
	s.CreateQueue("tenants", map[string]any{"fairness": "round_robin", "paused": true, "group_max_concurrency": 5})
	s.Must(http.StatusCreated, "POST", "/queues/tenants/tasks/batch", map[string]any{"tasks": []map[string]any{
		{"payload": 1, "group": "acme"}, {"payload": 2, "group": "acme"}, {"payload": 3, "group": "beta"}}})
	s.Must(http.StatusOK, "PUT", "/queues/tenants/groups/beta", map[string]any{"weight": 3})
	type overrides struct {
		Weight         *int     `json:"weight"`
		MaxConcurrency *int     `json:"max_concurrency"`
		RateLimit      *float64 `json:"rate_limit"`
		RateBurst      *int     `json:"rate_burst"`
	}
	acme := func() overrides {
		var g overrides
		s.Must(http.StatusOK, "GET", "/queues/tenants/groups/acme", nil).JSON(t, &g)
		return g
	}

	page := e.open("#/groups?queue=tenants")
	row := func(g string) string { return `document.querySelector('#group-list tbody tr[data-group="` + g + `"]')` }
	page.waitJS(row("beta")+` !== null && `+row("acme")+` !== null`, "both groups")
	page.click(`#group-list tbody tr[data-group="beta"] button[data-action="edit"]`)
	page.waitJS(`!document.getElementById('group-edit-card').hidden &&
		document.getElementById('go-weight').value === '3' && document.getElementById('go-max_concurrency').value === ''`,
		"beta's own weight in the form, its cap the queue's")
	page.click(`#group-list tbody tr[data-group="acme"] button[data-action="edit"]`)
	page.waitJS(`document.getElementById('group-edit-title').textContent.includes('acme') &&
		document.getElementById('go-weight').value === ''`, "acme's form, no override")
	page.enter("#go-weight", "4")
	page.enter("#go-max_concurrency", "2")
	page.click("#group-save")
	testserver.Eventually(t, 5*time.Second, "acme's overrides saved", func() bool {
		g := acme()
		return g.Weight != nil && *g.Weight == 4 && g.MaxConcurrency != nil && *g.MaxConcurrency == 2 &&
			g.RateLimit == nil && g.RateBurst == nil
	})
	page.waitJS(row("acme")+`.querySelectorAll('td.override').length === 2 && `+
		row("acme")+`.querySelector('td.override').textContent === '4'`, "acme's row marking its own weight and cap")

	page.enter("#go-weight", "5000")
	page.click("#group-save")
	page.waitJS(`document.querySelector('#group-edit .error-box')?.textContent.includes('weight must be an integer from 1 to 1000')`, "the API's message")
	if g := acme(); g.Weight == nil || *g.Weight != 4 {
		t.Fatalf("a refused save changed acme's weight: %+v", g)
	}
	page.checkClean("status of 400") // the refused PUT
}
