package lifecycle_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The packages that ask for transitions (or could be tempted to): their non-test
// code must go through package lifecycle for every transition statement and every
// Redis follow-up.
var callers = []string{
	"api", "dispatcher", "watchdog", "scheduler", "internal/push",
	"server", "dashboard", "auth", "audit", "internal/janitor", "internal/tally", "cmd/taskforge",
}

// transitions are the methods of *storage.Store whose statement changes a task's
// status (or a queue's, for the buffer's sake): each has its follow-ups in one
// lifecycle function, which is the only code that may call it.
var transitions = []string{
	"Enqueue", "EnqueueWith", "SubmitWorkflow", "DispatchDue", "DispatchDueGrouped", "FireDueSchedule", "TriggerSchedule",
	"ClaimMany", "Ack", "AckMany", "Nack", "Release", "ReclaimExpired",
	"CancelTask", "CancelTasks", "CancelWaiting", "CancelWorkflow", "Replay",
	"CreateQueue", "UpdateQueue", "DeleteQueue",
	"Heartbeat", "HeartbeatProgress", "HeartbeatMany", "DiscardDead", "DiscardDeadMany",
	"DeleteExpiredTasks", "DeleteExpiredWorkflows",
	"DeleteExpiredHistory", "DeleteHistoryDayWorkflows", "DetachHistoryDay", "DropDetachedHistory",
}

// followUps are the methods of *buffer.Buffer that change what Redis holds for tasks
// (buffer entries, concurrency slots) or announce it (wake-ups, finished tasks):
// the Redis half of a transition. The others (Sizes, Missing, MissingOf, Lost, the
// key and channel names) only read.
var followUps = []string{
	"Add", "Putback", "Pop", "Release", "Reconcile", "SyncSlots", "Unsync", "Wake",
	"Remove", "Drop", "PublishDone",
	"AddGrouped", "PutbackGrouped", "FairPop", "ReleaseGroup", "RemoveGrouped", "ReconcileGrouped",
	"SyncGroupSlots", "SetGroup", "DropFair",
}

// repairs may call follow-ups outside lifecycle: the dispatcher's repair pass makes
// Redis match PostgreSQL again (re-adds lost entries of tasks already claimed,
// rebuilds slots from the executing tasks) and changes no task's status.
var repairs = map[string][]string{
	"dispatcher.(*Dispatcher).readd":        {"Add"},
	"dispatcher.(*Dispatcher).readdGrouped": {"AddGrouped"},
	"dispatcher.(*Dispatcher).syncSlots":    {"Reconcile", "ReconcileGrouped"},
	// After Redis lost its data, fair queues' group overrides are written again.
	"dispatcher.(*Dispatcher).mirrorGroups": {"SetGroup"},
}

// redisWrites are the prefixes of the go-redis methods that change or announce
// what Redis holds (commands, scripts, pipelines). Reading, subscribing, pinging and
// closing a client are not follow-ups.
var redisWrites = []string{
	"ZAdd", "ZRem", "ZIncr", "ZPop", "BZPop", "ZMPop", "SAdd", "SRem", "SPop", "SMove",
	"LPush", "RPush", "LPop", "RPop", "BLPop", "BRPop", "LRem", "LSet", "LMove", "BLMove",
	"HSet", "HDel", "HIncr", "Set", "MSet", "GetSet", "GetDel", "GetEx", "Del", "Unlink",
	"Incr", "Decr", "Append", "Expire", "PExpire", "Persist", "Rename", "Copy",
	"Publish", "SPublish", "Eval", "EvalSha", "EvalRO", "EvalShaRO", "FCall", "Run",
	"Pipeline", "Pipelined", "TxPipeline", "TxPipelined", "Watch", "FlushAll", "FlushDB",
}

const (
	storePkg  = "github.com/taskforge/taskforge/storage"
	bufferPkg = "github.com/taskforge/taskforge/buffer"
	redisPkg  = "github.com/redis/go-redis/v9"
)

// TestTransitionsGoThroughLifecycle: outside package lifecycle, the callers' non-test
// code calls no transition statement of storage, no follow-up of buffer but the
// dispatcher's repair, and no go-redis method that writes (api's wake-up listener
// may subscribe to the buffer's channels, server may read Redis's settings).
func TestTransitionsGoThroughLifecycle(t *testing.T) {
	calls, imp := loadCalls(t, callers)
	// Every name listed must be a method of its type, or the list has rotted.
	for _, l := range []struct {
		pkg, typ string
		methods  []string
	}{{storePkg, "Store", transitions}, {bufferPkg, "Buffer", followUps}} {
		pkg, err := imp.Import(l.pkg)
		if err != nil {
			t.Fatal(err)
		}
		ms := types.NewMethodSet(types.NewPointer(pkg.Scope().Lookup(l.typ).Type()))
		for _, m := range l.methods {
			if ms.Lookup(pkg, m) == nil {
				t.Errorf("%s.(*%s) has no method %s: update the list", l.pkg, l.typ, m)
			}
		}
	}
	var bad []string
	for _, c := range calls {
		switch {
		case c.recv == storePkg+".Store" && slices.Contains(transitions, c.method):
			bad = append(bad, fmt.Sprintf("%s: %s calls storage.(*Store).%s, a transition statement: use its lifecycle function", c.pos, c.fn, c.method))
		case c.recv == bufferPkg+".Buffer" && slices.Contains(followUps, c.method) && !slices.Contains(repairs[c.fn], c.method):
			bad = append(bad, fmt.Sprintf("%s: %s calls buffer.(*Buffer).%s, a Redis follow-up: it belongs to a lifecycle transition", c.pos, c.fn, c.method))
		case strings.HasPrefix(c.recv, redisPkg+".") && slices.ContainsFunc(redisWrites, func(w string) bool { return strings.HasPrefix(c.method, w) }):
			bad = append(bad, fmt.Sprintf("%s: %s writes to Redis directly (%s.%s): go through package buffer, from a lifecycle transition", c.pos, c.fn, strings.TrimPrefix(c.recv, redisPkg+"."), c.method))
		}
	}
	for _, b := range bad {
		t.Error(b)
	}
	// The rule must see the calls it allows, or it checks nothing (a renamed method,
	// a moved package).
	for fn, methods := range repairs {
		for _, m := range methods {
			if !slices.ContainsFunc(calls, func(c call) bool { return c.fn == fn && c.method == m && c.recv == bufferPkg+".Buffer" }) {
				t.Errorf("%s no longer calls buffer.(*Buffer).%s: update repairs", fn, m)
			}
		}
	}
	if !slices.ContainsFunc(calls, func(c call) bool { return c.recv == storePkg+".Store" }) {
		t.Error("no call of a storage.(*Store) method found at all: the check sees nothing")
	}
}

// call is one method call in a caller's non-test code.
type call struct {
	pos    string // file:line
	fn     string // the enclosing function: pkg.Func or pkg.(*T).Method, pkg relative to the module
	recv   string // the method's receiver type: import path + "." + name
	method string
}

// loadCalls type-checks the non-test files of pkgs (relative to the module root)
// against the export data of their dependencies and returns every method call they
// make on a named type.
func loadCalls(t *testing.T, pkgs []string) ([]call, types.Importer) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"list", "-deps", "-export", "-json=ImportPath,Dir,GoFiles,Export,Module,Error"}
	for _, p := range pkgs {
		args = append(args, "./"+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	type listed struct {
		ImportPath, Dir, Export string
		GoFiles                 []string
		Module                  *struct{ Path string }
		Error                   *struct{ Err string }
	}
	exports := map[string]string{}
	byDir := map[string]listed{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		exports[p.ImportPath] = p.Export
		byDir[p.Dir] = p
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	var calls []call
	for _, rel := range pkgs {
		p, ok := byDir[filepath.Join(root, rel)]
		if !ok {
			t.Fatalf("go list did not list ./%s", rel)
		}
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
		if _, err := (&types.Config{Importer: imp}).Check(p.ImportPath, fset, files, info); err != nil {
			t.Fatalf("type-check %s: %v", p.ImportPath, err)
		}
		short := filepath.Base(rel)
		for _, f := range files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				fn := short + "." + funcName(fd)
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					ce, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					se, ok := ce.Fun.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					sel, ok := info.Selections[se]
					if !ok || sel.Kind() != types.MethodVal {
						return true
					}
					recv := sel.Obj().(*types.Func).Type().(*types.Signature).Recv().Type()
					if ptr, ok := recv.(*types.Pointer); ok {
						recv = ptr.Elem()
					}
					named, ok := recv.(*types.Named)
					if !ok || named.Obj().Pkg() == nil {
						return true // a method of an unnamed type
					}
					pos := fset.Position(ce.Pos())
					rp, _ := filepath.Rel(root, pos.Filename)
					calls = append(calls, call{pos: fmt.Sprintf("%s:%d", rp, pos.Line), fn: fn,
						recv: named.Obj().Pkg().Path() + "." + named.Obj().Name(), method: se.Sel.Name})
					return true
				})
			}
		}
	}
	return calls, imp
}

// funcName is Func, or (*T).Method / T.Method for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	star := ""
	if s, ok := typ.(*ast.StarExpr); ok {
		star, typ = "*", s.X
	}
	if ix, ok := typ.(*ast.IndexExpr); ok { // a generic receiver
		typ = ix.X
	}
	name := fmt.Sprint(typ)
	if id, ok := typ.(*ast.Ident); ok {
		name = id.Name
	}
	if star != "" {
		return "(" + star + name + ")." + fd.Name.Name
	}
	return name + "." + fd.Name.Name
}
