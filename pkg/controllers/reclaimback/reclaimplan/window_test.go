package reclaimplan

import (
	"strings"
	"testing"
	"time"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestWindowOpen(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	ny := mustLoad(t, "America/New_York")
	weeknights := Window{Days: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday}, Hour: 22, Minute: 0, Duration: 4 * time.Hour, Location: berlin}
	tests := []struct {
		name  string
		w     Window
		now   time.Time
		open  bool
		until time.Time
	}{
		{name: "inside, before midnight", w: weeknights, now: time.Date(2026, 12, 1, 23, 0, 0, 0, berlin), open: true, until: time.Date(2026, 12, 2, 2, 0, 0, 0, berlin)},
		{name: "inside, after midnight: opened yesterday", w: weeknights, now: time.Date(2026, 12, 2, 1, 59, 0, 0, berlin), open: true, until: time.Date(2026, 12, 2, 2, 0, 0, 0, berlin)},
		{name: "the closing instant is outside", w: weeknights, now: time.Date(2026, 12, 2, 2, 0, 0, 0, berlin)},
		{name: "the opening instant is inside", w: weeknights, now: time.Date(2026, 12, 1, 22, 0, 0, 0, berlin), open: true, until: time.Date(2026, 12, 2, 2, 0, 0, 0, berlin)},
		{name: "Saturday 01:00: Friday's window still open", w: weeknights, now: time.Date(2026, 12, 5, 1, 0, 0, 0, berlin), open: true, until: time.Date(2026, 12, 5, 2, 0, 0, 0, berlin)},
		{name: "Saturday 23:00: no window on Saturdays", w: weeknights, now: time.Date(2026, 12, 5, 23, 0, 0, 0, berlin)},
		{name: "Monday 01:00: Sunday has none", w: weeknights, now: time.Date(2026, 12, 7, 1, 0, 0, 0, berlin)},
		{name: "the zone counts, not UTC: 21:30 UTC is 22:30 in Berlin", w: weeknights, now: time.Date(2026, 12, 1, 21, 30, 0, 0, time.UTC), open: true, until: time.Date(2026, 12, 2, 2, 0, 0, 0, berlin)},
		{
			// 2026-03-08: New York springs forward at 02:00 → 03:00; 02:30 does not exist.
			name: "DST spring forward through the start: opens at the shifted time",
			w:    Window{Days: []time.Weekday{time.Sunday}, Hour: 2, Minute: 30, Duration: time.Hour, Location: ny},
			now:  time.Date(2026, 3, 8, 3, 45, 0, 0, ny), open: true, until: time.Date(2026, 3, 8, 4, 30, 0, 0, ny),
		},
		{
			// 2026-11-01: New York falls back at 02:00 → 01:00; the 2 h window lasts 2 h of elapsed time.
			name: "DST fall back inside the window: it lasts its duration, not its wall-clock span",
			w:    Window{Days: []time.Weekday{time.Sunday}, Hour: 0, Minute: 30, Duration: 2 * time.Hour, Location: ny},
			now:  time.Date(2026, 11, 1, 6, 45, 0, 0, time.UTC), // 01:45 EST: before 02:30 on the wall, but 2 h 15 m after 00:30 EDT
		},
		{
			name: "DST fall back: the first 01:15 is inside",
			w:    Window{Days: []time.Weekday{time.Sunday}, Hour: 0, Minute: 30, Duration: 2 * time.Hour, Location: ny},
			now:  time.Date(2026, 11, 1, 5, 15, 0, 0, time.UTC), // 01:15 EDT
			open: true, until: time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC),
		},
		{
			name: "DST fall back through the start: the first of the two 01:30s",
			w:    Window{Days: []time.Weekday{time.Sunday}, Hour: 1, Minute: 30, Duration: 30 * time.Minute, Location: ny},
			now:  time.Date(2026, 11, 1, 5, 45, 0, 0, time.UTC), // 01:45 EDT
			open: true, until: time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC),
		},
		{
			name: "DST fall back through the start: closed at the second 01:45",
			w:    Window{Days: []time.Weekday{time.Sunday}, Hour: 1, Minute: 30, Duration: 30 * time.Minute, Location: ny},
			now:  time.Date(2026, 11, 1, 6, 45, 0, 0, time.UTC), // 01:45 EST
		},
		{
			name: "a whole-day window crossing midnight",
			w:    Window{Days: []time.Weekday{time.Wednesday}, Hour: 12, Duration: 24 * time.Hour, Location: time.UTC},
			now:  time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC), open: true, until: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			open, until := tt.w.Open(tt.now)
			if open != tt.open || !until.Equal(tt.until) {
				t.Errorf("Open(%s) = %v, %s; want %v, %s", tt.now, open, until, tt.open, tt.until)
			}
		})
	}
}

func TestScheduleOpenAndNext(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	nights := Window{Days: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday}, Hour: 22, Duration: 4 * time.Hour, Location: berlin}
	sunday := Window{Days: []time.Weekday{time.Sunday}, Hour: 6, Duration: 12 * time.Hour, Location: time.UTC}
	s := Schedule{Windows: []Window{nights, sunday}}

	// Saturday noon in Berlin: closed; the next opening is Sunday 06:00 UTC.
	open, _, next := s.Open(time.Date(2026, 12, 5, 12, 0, 0, 0, berlin))
	if open || !next.Equal(time.Date(2026, 12, 6, 6, 0, 0, 0, time.UTC)) {
		t.Errorf("Saturday: open %v, next %s; want closed, next Sunday 06:00 UTC", open, next)
	}
	// Sunday 20:00 Berlin: Sunday's window closed at 18:00 UTC; next is Monday 22:00 Berlin.
	open, _, next = s.Open(time.Date(2026, 12, 6, 20, 0, 0, 0, berlin))
	if open || !next.Equal(time.Date(2026, 12, 7, 22, 0, 0, 0, berlin)) {
		t.Errorf("Sunday evening: open %v, next %s; want closed, next Monday 22:00 Berlin", open, next)
	}
	// Tuesday 23:00 Berlin: open until Wednesday 02:00.
	open, until, _ := s.Open(time.Date(2026, 12, 8, 23, 0, 0, 0, berlin))
	if !open || !until.Equal(time.Date(2026, 12, 9, 2, 0, 0, 0, berlin)) {
		t.Errorf("Tuesday night: open %v until %s", open, until)
	}
	if open, until, next := (Schedule{Always: true}).Open(time.Now()); !open || !until.IsZero() || !next.IsZero() {
		t.Errorf("Always: %v %s %s", open, until, next)
	}
	if open, _, next := (Schedule{}).Open(time.Now()); open || !next.IsZero() {
		t.Errorf("no windows: open %v next %s, want never", open, next)
	}
}

func TestParseWindow(t *testing.T) {
	w, err := ParseWindow([]string{"fri", "Mon", "Mon"}, "22:30", 3*time.Hour, "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Days) != 2 || w.Days[0] != time.Monday || w.Days[1] != time.Friday || w.Hour != 22 || w.Minute != 30 || w.Location.String() != "Europe/Berlin" {
		t.Errorf("ParseWindow = %+v", w)
	}
	if w, err := ParseWindow([]string{"Daily"}, "00:00", time.Hour, ""); err != nil || len(w.Days) != 7 || w.Location != time.UTC {
		t.Errorf("Daily in UTC = %+v, %v", w, err)
	}
	for _, tt := range []struct {
		days     []string
		start    string
		duration time.Duration
		zone     string
		want     string
	}{
		{[]string{"Mon"}, "24:00", time.Hour, "", "HH:MM"},
		{[]string{"Mon"}, "9:00", time.Hour, "", "HH:MM"},
		{[]string{"Mon"}, "22:00", 25 * time.Hour, "", "at most 24h"},
		{[]string{"Mon"}, "22:00", 0, "", "more than 0"},
		{[]string{"Funday"}, "22:00", time.Hour, "", "must be one of"},
		{nil, "22:00", time.Hour, "", "at least one day"},
		{[]string{"Mon"}, "22:00", time.Hour, "Mars/Olympus", "IANA name"},
	} {
		if _, err := ParseWindow(tt.days, tt.start, tt.duration, tt.zone); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseWindow(%v, %q, %s, %q) error %v, want one containing %q", tt.days, tt.start, tt.duration, tt.zone, err, tt.want)
		}
	}
}

func TestCoolDown(t *testing.T) {
	for _, tt := range []struct {
		failures int
		want     time.Duration
	}{{0, 0}, {1, 10 * time.Minute}, {2, 20 * time.Minute}, {3, 40 * time.Minute}, {5, 160 * time.Minute}, {6, 4 * time.Hour}, {60, 4 * time.Hour}} {
		if got := CoolDown(tt.failures, 10*time.Minute, 4*time.Hour); got != tt.want {
			t.Errorf("CoolDown(%d) = %s, want %s", tt.failures, got, tt.want)
		}
	}
}
