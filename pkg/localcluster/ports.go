package localcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Ports for the components. A port is picked, closed and passed to a child process that binds
// it later; in that window another process may take it. The kernel hands out ports of its
// ephemeral range (net.ipv4.ip_local_port_range, 32768–60999 on Linux by default) both for
// listen(":0") and for the client side of every outgoing connection, and a test run opens
// thousands (components talking to the API server): a port picked with ":0" can be taken by a
// connection before the component binds it ("bind: address already in use", seen in CI). Ports
// are therefore picked at random below that range, where the kernel never assigns one by itself;
// each is checked free by listening on it until all n are chosen.
//
// The listen check cannot see a port that another picker chose but whose component has not bound
// it yet (a helm install can take seconds), and the test packages run in parallel processes that
// pick from the same range: two of them chose one port in CI ("bind: address already in use" of
// a lifeboat-controller started by the chart test). A chosen port is therefore also claimed for
// every process on the machine (portClaims) until its component has surely bound it.

// listenRange is where ports are picked: [lo, hi].
type listenRange struct{ lo, hi int }

// defaultListenRange is used when the ephemeral range cannot be read or leaves no room below it.
var defaultListenRange = listenRange{lo: 20000, hi: 32767}

// listenRangeBelow returns the ports below the kernel's ephemeral range (from the text of
// /proc/sys/net/ipv4/ip_local_port_range, "low high"), starting at 10000; the default when the
// text does not parse or fewer than 1,000 ports are left. Pure.
func listenRangeBelow(ephemeral string) listenRange {
	f := strings.Fields(ephemeral)
	if len(f) != 2 {
		return defaultListenRange
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low-1 < 10000+1000 {
		return defaultListenRange
	}
	return listenRange{lo: 10000, hi: low - 1}
}

func (r listenRange) String() string { return fmt.Sprintf("%d-%d", r.lo, r.hi) }

func freePorts(n int) ([]int, error) {
	raw, _ := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	claims := portClaims{dir: filepath.Join(os.TempDir(), "lifeboat-port-claims"), ttl: portClaimTTL, now: time.Now}
	return pickPorts(listenRangeBelow(string(raw)), n, rand.IntN, claims.claim)
}

// portClaimTTL is how long a chosen port stays claimed: far longer than any component takes to
// bind its port after the pick (a bound port then fails the listen check by itself).
const portClaimTTL = 5 * time.Minute

// portClaims are the ports chosen on this machine in the last ttl, by any process: a file per
// port in dir, created exclusively. A claim older than ttl lapses and is taken over (two
// processes taking over one lapsed claim at the same instant could both have it; that needs the
// same random port twice within microseconds). Where dir cannot be written, every claim
// succeeds and the listen check is left alone.
type portClaims struct {
	dir string
	ttl time.Duration
	now func() time.Time
}

// claim claims port; false if a claim of it is still running.
func (c portClaims) claim(port int) bool {
	if err := os.MkdirAll(c.dir, 0o777); err != nil {
		return true
	}
	path := filepath.Join(c.dir, strconv.Itoa(port))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if err == nil {
		f.Close()
		return true
	}
	if !errors.Is(err, fs.ErrExist) {
		return true
	}
	info, err := os.Stat(path)
	if err != nil {
		return true
	}
	now := c.now()
	if now.Sub(info.ModTime()) < c.ttl {
		return false
	}
	return os.Chtimes(path, now, now) == nil
}

// pickPorts chooses n distinct ports of r that are free now (each is listened on until all are
// chosen) and claimed (claim; see portClaims), trying random ones (intn) at most 50 times per
// port.
func pickPorts(r listenRange, n int, intn func(int) int, claim func(port int) bool) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for len(ports) < n {
		var l net.Listener
		var err error
		for try := 0; try < 50 && l == nil; try++ {
			port := r.lo + intn(r.hi-r.lo+1)
			l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err == nil && !claim(port) {
				l.Close()
				l, err = nil, fmt.Errorf("port %d is claimed by another picker", port)
			}
		}
		if l == nil {
			return nil, fmt.Errorf("no free loopback port in %s after 50 tries (last: %v)", r, err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// freePort picks one free loopback port (freePorts).
func freePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}
