package localcluster

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestListenRangeBelow(t *testing.T) {
	for _, tc := range []struct {
		name, ephemeral string
		want            listenRange
	}{
		{"Linux default", "32768\t60999\n", listenRange{10000, 32767}},
		{"a wider ephemeral range", "15000 65000", listenRange{10000, 14999}},
		{"too little room below", "10500 65000", defaultListenRange},
		{"unreadable", "", defaultListenRange},
		{"not numbers", "a b", defaultListenRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := listenRangeBelow(tc.ephemeral); got != tc.want {
				t.Errorf("listenRangeBelow(%q) = %v, want %v", tc.ephemeral, got, tc.want)
			}
		})
	}
}

// A taken port is skipped, the ports are distinct and inside the range, and a range with no
// free port is an error that names it.
func TestPickPorts(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().(*net.TCPAddr).Port
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	spare := free.Addr().(*net.TCPAddr).Port
	free.Close()

	// The random source offers the taken port first, then the spare one.
	offers := []int{busy, spare}
	r := listenRange{lo: 0, hi: 65535}
	i := 0
	got, err := pickPorts(r, 1, func(int) int { p := offers[i%len(offers)]; i++; return p }, claimAll)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != spare {
		t.Errorf("picked %v, want the free port %d (the taken %d skipped)", got, spare, busy)
	}

	got, err = pickPorts(defaultListenRange, 4, func(n int) int { i++; return (i * 7919) % n }, claimAll)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range got {
		if p < defaultListenRange.lo || p > defaultListenRange.hi || seen[p] {
			t.Errorf("ports %v: want 4 distinct ones in %s", got, defaultListenRange)
		}
		seen[p] = true
	}

	_, err = pickPorts(listenRange{lo: busy, hi: busy}, 1, func(int) int { return 0 }, claimAll)
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(busy)) {
		t.Errorf("a range whose only port is taken: error %v, want one naming %d", err, busy)
	}
}

func claimAll(int) bool { return true }

// A port another picker claimed is skipped like a taken one, and a range whose only port is
// claimed is an error that says so.
func TestPickPortsSkipsClaimed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().(*net.TCPAddr).Port
	l.Close()
	l, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := l.Addr().(*net.TCPAddr).Port
	l.Close()
	offers, i := []int{a, b}, 0
	claimedA := func(p int) bool { return p != a }
	got, err := pickPorts(listenRange{lo: 0, hi: 65535}, 1, func(int) int { p := offers[i%2]; i++; return p }, claimedA)
	if err != nil || got[0] != b {
		t.Errorf("picked %v (%v), want %d (the claimed %d skipped)", got, err, b, a)
	}
	_, err = pickPorts(listenRange{lo: a, hi: a}, 1, func(int) int { return 0 }, claimedA)
	if err == nil || !strings.Contains(err.Error(), "claimed") {
		t.Errorf("a range whose only port is claimed: error %v, want one saying so", err)
	}
}

// Claims hold across pickers (a file per port) until they lapse; where the directory cannot be
// written, claiming does not get in the way.
func TestPortClaims(t *testing.T) {
	now := time.Date(2026, 12, 7, 17, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	one := portClaims{dir: dir, ttl: 5 * time.Minute, now: func() time.Time { return now }}
	other := one // another process: the same directory
	if !one.claim(20001) {
		t.Fatal("a first claim failed")
	}
	if other.claim(20001) {
		t.Error("a running claim was claimed again")
	}
	if !other.claim(20002) {
		t.Error("another port could not be claimed")
	}
	if err := os.Chtimes(filepath.Join(dir, "20001"), now.Add(-6*time.Minute), now.Add(-6*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if !other.claim(20001) {
		t.Error("a lapsed claim was not taken over")
	}
	if one.claim(20001) {
		t.Error("the taken-over claim was claimed again")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !(portClaims{dir: filepath.Join(file, "claims"), ttl: time.Minute, now: time.Now}).claim(20003) {
		t.Error("an unwritable claims directory blocked the pick")
	}
}
