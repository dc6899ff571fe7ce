package localpg

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runAsCredential returns the credential to run the PostgreSQL programs with:
// nil when the process is not root, else the `postgres` system user, or
// `nobody` when there is no such user.
func runAsCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		// Groups is empty: the child drops root's supplementary groups.
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
	}
	return nil, errors.New("running as root, and neither a `postgres` nor a `nobody` user exists to run PostgreSQL as")
}

// chownTree hands path and everything below it to cred's user, unless cred
// is nil or path already belongs to that user.
func chownTree(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	if fi, err := os.Lstat(path); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == cred.Uid && st.Gid == cred.Gid {
			// Assume a tree whose top is right was made by us and is right.
			return nil
		}
	}
	return filepath.WalkDir(path, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
}

// ensureTraversable makes sure cred's user can reach path: every ancestor
// directory it could not search gets the search bit for others (o+x, which
// allows following a known path but not listing the directory).
func ensureTraversable(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		mode := fi.Mode().Perm()
		ok := mode&0o001 != 0
		if st, isStat := fi.Sys().(*syscall.Stat_t); isStat && !ok {
			ok = (st.Uid == cred.Uid && mode&0o100 != 0) || (st.Gid == cred.Gid && mode&0o010 != 0)
		}
		if !ok {
			if err := os.Chmod(d, fi.Mode()&fs.ModePerm|fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)|0o001); err != nil {
				return fmt.Errorf("let user %d reach %s: %w", cred.Uid, d, err)
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// childEnv is the environment for the PostgreSQL programs: ours without PG*
// variables (which pg_ctl and friends would obey) and with the C locale.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// ReapNoHang reports whether child pid has exited, reaping it if so. The test
// harness uses it for the redis-server processes it starts, too.
func ReapNoHang(pid int) bool {
	var ws syscall.WaitStatus
	for {
		wpid, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil: // ECHILD: not our child any more
			return true
		default:
			return wpid == pid
		}
	}
}

// reap waits up to timeout for child pid to exit and reaps it.
func reap(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if ReapNoHang(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processAlive reports whether a process with this pid exists.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// readPostmasterPID returns the postmaster's pid and System V shared memory
// id recorded in dataDir/postmaster.pid (0 when absent).
func readPostmasterPID(dataDir string) (pid, shmID int) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, 0
	}
	lines := strings.Split(string(b), "\n")
	pid, _ = strconv.Atoi(strings.TrimSpace(lines[0]))
	// Line 7: "shmem key   shmem id".
	if len(lines) >= 7 {
		if f := strings.Fields(lines[6]); len(f) == 2 {
			shmID, _ = strconv.Atoi(f[1])
		}
	}
	return pid, shmID
}

// removeStaleShm marks for removal the System V shared memory segment of a
// postmaster that was killed and will not be restarted (a restart would
// clean it up itself). The kernel frees it once nobody is attached.
func removeStaleShm(dataDir string) {
	pid, shmID := readPostmasterPID(dataDir)
	if shmID <= 0 || processAlive(pid) {
		return
	}
	const ipcRMID = 0
	_, _, _ = syscall.Syscall(syscall.SYS_SHMCTL, uintptr(shmID), ipcRMID, 0)
}

// Run directories: each Start makes one, named runDirPrefix+random, in the
// temporary directory. It holds the socket directory, the owner file and,
// for throwaway servers, the cluster and its log.
const (
	runDirPrefix = "localpg-"
	ownerFile    = "owner.pid"
)

// runDirBase returns where run directories go: os.TempDir, unless its path
// is so long that the socket path would exceed the 107-byte limit.
func runDirBase() string {
	base := os.TempDir()
	if len(base) > 60 {
		return "/tmp"
	}
	return base
}

// newRunDir creates a run directory that cred's user can traverse and records
// this process as its owner.
func newRunDir(cred *syscall.Credential) (string, error) {
	dir, err := os.MkdirTemp(runDirBase(), runDirPrefix)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	if err := ensureTraversable(dir, cred); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// sweepStale removes run directories in base whose owner process is gone and
// whose postmaster (if any) is not running: the leftovers of processes that
// died without calling Stop. Directories it cannot judge are left alone.
func sweepStale(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, runDirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || owner == os.Getpid() || processAlive(owner) {
			continue
		}
		data := filepath.Join(dir, "data")
		if pid, _ := readPostmasterPID(data); processAlive(pid) {
			continue
		}
		removeStaleShm(data)
		_ = os.RemoveAll(dir)
	}
}

// childPIDs returns the pids of the processes whose parent is pid, from
// /proc.
func childPIDs(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := procStat(c); ppid == pid {
			kids = append(kids, c)
		}
	}
	return kids
}

// procStat returns the parent pid and state letter of process pid from
// /proc/pid/stat (0 and 0 if it is gone).
func procStat(pid int) (ppid int, state byte) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0
	}
	// "pid (comm) S ppid ...": comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, 0
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0][0]
}

// waitGone waits up to timeout until none of pids is a live process (gone or
// a zombie).
func waitGone(pids []int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for _, p := range pids {
		for {
			if _, state := procStat(p); state == 0 || state == 'Z' || state == 'X' {
				break
			}
			if time.Now().After(deadline) {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// ServerCredential returns the credential a server program the harness starts
// should run with: nil when the process is not root, else the `postgres` system
// user, or `nobody` when there is no such user. Programs that refuse to run as
// root (PgBouncer) use it as PostgreSQL does.
func ServerCredential() (*syscall.Credential, error) { return runAsCredential() }

// HandOver gives dir and everything below it to cred's user and lets that user
// reach it (ancestors get o+x). A nil cred does nothing.
func HandOver(dir string, cred *syscall.Credential) error {
	if err := chownTree(dir, cred); err != nil {
		return err
	}
	return ensureTraversable(dir, cred)
}
