package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// process is one child component with its log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited and been reaped
	waitErr error
}

// spawner starts every child from one OS thread that stays locked for the harness' lifetime.
// Pdeathsig is delivered when the *thread* that forked the child exits, so a thread that lives
// as long as the test process makes the kernel kill every child if the test binary dies (panic,
// timeout, SIGKILL) before Stop runs.
type spawner struct {
	reqs chan spawnReq
	quit chan struct{}
}

type spawnReq struct {
	cmd   *exec.Cmd
	reply chan error
}

var (
	spawnerOnce sync.Once
	theSpawner  *spawner
)

func getSpawner() *spawner {
	spawnerOnce.Do(func() {
		theSpawner = &spawner{reqs: make(chan spawnReq)}
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must outlive every child
			for r := range theSpawner.reqs {
				r.reply <- r.cmd.Start()
			}
		}()
	})
	return theSpawner
}

func (s *spawner) start(cmd *exec.Cmd) error {
	reply := make(chan error)
	s.reqs <- spawnReq{cmd: cmd, reply: reply}
	return <-reply
}

// startProcess runs bin with args, stdout and stderr appended to <runDir>/<name>.log.
func startProcess(runDir, name, bin string, args []string, env []string) (*process, error) {
	logPath := filepath.Join(runDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true, // Ctrl-C in a terminal reaches the harness, which stops children in order
		Pdeathsig: syscall.SIGKILL,
	}
	fmt.Fprintf(logFile, "### %s %s %v\n", time.Now().Format(time.RFC3339), bin, args)
	if err := getSpawner().start(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the child's process ID.
func (p *process) Pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs the process group.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.Pid())
	}
}

// tail returns the last n bytes of the process log.
func (p *process) tail(n int64) string {
	return tailFile(p.logPath, n)
}

func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := st.Size() - n
	if off < 0 {
		off = 0
	}
	buf := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(buf, off)
	if off > 0 {
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:]
		}
	}
	return string(buf)
}

// waitFor polls check until it returns true, the process dies, or ctx ends.
func waitFor(ctx context.Context, p *process, what string, check func(context.Context) bool) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if check(ctx) {
			return nil
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited before %s (%v); last log lines:\n%s", p.name, what, p.waitErr, p.tail(4000))
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("timed out waiting for %s", what)
			if p != nil {
				msg += "; last log lines of " + p.name + ":\n" + p.tail(4000)
			}
			return errors.New(msg)
		case <-tick.C:
		}
	}
}

// ProcessAlive reports whether a PID names a live (non-zombie) process. Tests use it to prove
// that Stop leaves nothing behind.
func ProcessAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// Field 3 is the state; the command name in field 2 is parenthesised and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] != 'Z' && b[i+2] != 'X'
}
