package conformance_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskforge/taskforge/internal/testenv"
)

// envPython names an interpreter to use instead of the search below.
const envPython = "TASKFORGE_PYTHON"

// pythonSDKDir is the Python SDK, relative to this package.
const pythonSDKDir = "../python"

// pythonProbe succeeds on an interpreter that can build the SDK offline: Python
// 3.11 or later with venv, setuptools and wheel (Debian: python3, python3-venv,
// python3-setuptools, python3-wheel). The venv it makes sees them through
// --system-site-packages, since no package index is reachable.
const pythonProbe = `import sys, venv, ensurepip, setuptools, wheel; sys.exit(0 if sys.version_info >= (3, 11) else 1)`

// findPython returns the first interpreter that passes pythonProbe: $TASKFORGE_PYTHON,
// else Debian's /usr/bin/python3 (where apt installs setuptools and pytest), else
// python3 on PATH.
func findPython() (string, error) {
	candidates := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	if p := os.Getenv(envPython); p != "" {
		candidates = []string{p}
	}
	var tried []string
	for _, p := range candidates {
		out, err := exec.Command(p, "-c", pythonProbe).CombinedOutput()
		if err == nil {
			return p, nil
		}
		tried = append(tried, fmt.Sprintf("%s (%v %s)", p, err, strings.TrimSpace(string(out))))
	}
	return "", errors.New("no Python ≥ 3.11 with venv, setuptools and wheel among " + strings.Join(tried, ", ") +
		" (Debian: apt-get install -y python3 python3-venv python3-setuptools python3-wheel; or set " + envPython + ")")
}

// requirePython skips the test when err says a Python program is missing, or
// fails it under CI, as the other tests treat missing server programs.
func requirePython(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv(testenv.EnvCI) == "" {
		t.Skipf("Python SDK tests skipped: %v", err)
	}
	t.Fatalf("Python SDK tests need Python under CI: %v", err)
}

// pythonVenv makes a venv in dir with the SDK installed the offline way
// (pip install --no-build-isolation), and returns its interpreter. The SDK is
// copied first, so the build leaves nothing in the source tree.
func pythonVenv(t *testing.T, dir string) string {
	t.Helper()
	py, err := findPython()
	requirePython(t, err)
	venv := filepath.Join(dir, "venv")
	run(t, "", py, "-m", "venv", "--system-site-packages", venv)
	src := filepath.Join(dir, "sdk-python")
	copyTree(t, pythonSDKDir, src)
	vpy := filepath.Join(venv, "bin", "python")
	run(t, "", vpy, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps", "--no-index",
		"--disable-pip-version-check", src)
	return vpy
}

// run runs a setup command, failing the test with its output when it fails.
func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// copyTree copies the regular files under src to dst, leaving out build
// leftovers (Python's and npm's).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		name := d.Name()
		if d.IsDir() && (name == "__pycache__" || name == "build" || name == ".pytest_cache" || name == ".mypy_cache" || name == "node_modules" || name == "dist" ||
			strings.HasSuffix(name, ".egg-info")) {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}

// TestPythonSDK runs the Python SDK's pytest suite (sdk/python/tests) against a
// real replica with a 2 s lease, so that `go test ./...` covers it.
func TestPythonSDK(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	vpy := pythonVenv(t, dir)
	if out, err := exec.Command(vpy, "-c", "import pytest").CombinedOutput(); err != nil {
		requirePython(t, fmt.Errorf("pytest is not importable (Debian: apt-get install -y python3-pytest): %v %s",
			err, strings.TrimSpace(string(out))))
	}
	s := startReplica(t)
	tests, err := filepath.Abs(filepath.Join(pythonSDKDir, "tests"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(vpy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", tests)
	cmd.Dir = dir // not the source tree: the installed package is the one tested
	cmd.Env = append(os.Environ(), "TASKFORGE_URL="+s.URL, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("pytest failed: %v", err)
	}
}

// TestPythonSDKTypes checks the package's annotations, and its tests, scenario
// and benchmark against them, with mypy --strict (Debian: python3-mypy), so that
// py.typed promises what it says.
func TestPythonSDKTypes(t *testing.T) {
	t.Parallel()
	py, err := findPython()
	requirePython(t, err)
	if out, err := exec.Command(py, "-m", "mypy", "--version").CombinedOutput(); err != nil {
		requirePython(t, fmt.Errorf("mypy is not installed (Debian: apt-get install -y python3-mypy): %v %s",
			err, strings.TrimSpace(string(out))))
	}
	dir := t.TempDir()
	copyTree(t, pythonSDKDir, filepath.Join(dir, "sdk-python"))
	cmd := exec.Command(py, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", filepath.Join(dir, "cache"),
		"src/taskforge", "conformance", "tests", "bench")
	cmd.Dir = filepath.Join(dir, "sdk-python")
	cmd.Env = append(os.Environ(), "MYPYPATH=src")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mypy --strict: %v\n%s", err, out)
	}
}
