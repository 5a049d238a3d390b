package localcluster

import (
	"net"
	"strconv"
	"strings"
	"testing"
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
	got, err := pickPorts(r, 1, func(int) int { p := offers[i%len(offers)]; i++; return p })
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != spare {
		t.Errorf("picked %v, want the free port %d (the taken %d skipped)", got, spare, busy)
	}

	got, err = pickPorts(defaultListenRange, 4, func(n int) int { i++; return (i * 7919) % n })
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

	_, err = pickPorts(listenRange{lo: busy, hi: busy}, 1, func(int) int { return 0 })
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(busy)) {
		t.Errorf("a range whose only port is taken: error %v, want one naming %d", err, busy)
	}
}
