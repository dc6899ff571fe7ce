package conformance_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/taskforge/taskforge/internal/testenv"
)

// typescriptSDKDir is the TypeScript SDK, relative to this package.
const typescriptSDKDir = "../typescript"

// typescriptSetup builds a copy of the TypeScript SDK in dir (npm ci, then tsc
// through npm run build), so the build leaves nothing in the source tree. Without
// node and npm the row is skipped, or fails under CI.
func typescriptSetup(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(typescriptSDKDir, "package.json")); err != nil {
		// A tree without the SDK has nothing to test; that is no missing program.
		t.Skipf("no TypeScript SDK in this tree: %v", err)
	}
	npm, err := exec.LookPath("npm")
	if err == nil {
		_, err = exec.LookPath("node")
	}
	if err != nil {
		if os.Getenv(testenv.EnvCI) == "" {
			t.Skipf("TypeScript SDK tests skipped: %v", err)
		}
		t.Fatalf("TypeScript SDK tests need node and npm under CI: %v", err)
	}
	src := filepath.Join(dir, "sdk-typescript")
	copyTree(t, typescriptSDKDir, src)
	run(t, src, npm, "ci", "--no-audit", "--no-fund")
	run(t, src, npm, "run", "build")
}

// typescriptCommand runs the built scenario (sdk/typescript/conformance/scenario.ts).
func typescriptCommand(dir string) []string {
	return []string{"node", filepath.Join(dir, "sdk-typescript", "dist", "conformance", "scenario.js")}
}

// TestTypeScriptSDK runs the TypeScript SDK's own tests (sdk/typescript/test,
// node --test through its run.js) against a real replica with a 2 s lease, so
// that `go test ./...` covers them as it covers the Python SDK's pytest suite.
func TestTypeScriptSDK(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	typescriptSetup(t, dir)
	s := startReplica(t)
	cmd := exec.Command("node", filepath.Join(dir, "sdk-typescript", "dist", "test", "run.js"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TASKFORGE_URL="+s.URL)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("the TypeScript SDK's tests failed: %v", err)
	}
}
