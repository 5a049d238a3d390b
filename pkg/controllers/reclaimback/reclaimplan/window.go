// Package reclaimback holds the pure decisions of reclaim-back (docs/ARCHITECTURE.md flow 8):
// when a maintenance window is open, which Karpenter On-Demand nodes are fallback capacity that
// Spot could take back, and how long to cool down after a failed try. No API calls: the
// controller fetches the inputs and writes the results.
package reclaimplan

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Window is a recurring maintenance window: it opens on each of Days at Hour:Minute wall-clock
// time in Location and stays open for Duration of elapsed time (at most 24 h), so a window may
// cross midnight. On the day clocks spring forward past the start time, the window opens as
// late as the clocks jumped (02:30, which does not exist, opens at 03:30); on the day they fall
// back, at the first of the two 01:30s.
type Window struct {
	Days         []time.Weekday
	Hour, Minute int
	Duration     time.Duration
	Location     *time.Location
}

// Schedule is when moves may start: always, or inside one of the windows.
type Schedule struct {
	Always  bool
	Windows []Window
}

// ParseWindow reads the API's strings: days "Mon".."Sun" (or "Daily"), start "HH:MM", an IANA
// time zone (empty: UTC).
func ParseWindow(days []string, start string, duration time.Duration, timeZone string) (Window, error) {
	w := Window{Duration: duration}
	if duration <= 0 || duration > 24*time.Hour {
		return w, fmt.Errorf("window duration %s must be more than 0 and at most 24h", duration)
	}
	if _, err := fmt.Sscanf(start, "%d:%d", &w.Hour, &w.Minute); err != nil || len(start) != 5 || w.Hour > 23 || w.Minute > 59 || w.Hour < 0 || w.Minute < 0 {
		return w, fmt.Errorf("window start %q must be HH:MM (00:00 to 23:59)", start)
	}
	loc, err := time.LoadLocation(timeZone)
	if err != nil {
		return w, fmt.Errorf("window time zone %q: %w (use an IANA name such as Europe/Berlin)", timeZone, err)
	}
	w.Location = loc
	seen := map[time.Weekday]bool{}
	for _, d := range days {
		if strings.EqualFold(d, "Daily") {
			for wd := time.Sunday; wd <= time.Saturday; wd++ {
				seen[wd] = true
			}
			continue
		}
		wd, ok := weekdays[strings.ToLower(d)]
		if !ok {
			return w, fmt.Errorf("window day %q must be one of Mon, Tue, Wed, Thu, Fri, Sat, Sun or Daily", d)
		}
		seen[wd] = true
	}
	if len(seen) == 0 {
		return w, fmt.Errorf("a window needs at least one day")
	}
	for wd := range seen {
		w.Days = append(w.Days, wd)
	}
	sort.Slice(w.Days, func(i, j int) bool { return w.Days[i] < w.Days[j] })
	return w, nil
}

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

func (w Window) onDay(d time.Weekday) bool {
	for _, x := range w.Days {
		if x == d {
			return true
		}
	}
	return false
}

// startOn is the window's opening on the calendar day of local (in w.Location). time.Date
// does not say which offset it picks for a wall-clock time that a DST change skips or repeats,
// so the offset is chosen here: the one in effect at local midnight (before the change) when
// the time exists with it — the first of two repeated times — else the later one; a skipped
// time is read with midnight's offset, which shifts it by the gap.
func (w Window) startOn(local time.Time) time.Time {
	y, m, d := local.Date()
	wall := func(t time.Time) bool {
		t = t.In(w.Location)
		return t.Hour() == w.Hour && t.Minute() == w.Minute
	}
	_, midnightOffset := time.Date(y, m, d, 0, 0, 0, 0, w.Location).Zone()
	early := time.Date(y, m, d, w.Hour, w.Minute, 0, 0, time.UTC).Add(-time.Duration(midnightOffset) * time.Second).In(w.Location)
	if wall(early) {
		return early
	}
	if late := time.Date(y, m, d, w.Hour, w.Minute, 0, 0, w.Location); wall(late) {
		return late
	}
	return early
}

// Open reports whether now is inside an occurrence of the window, and when that one closes.
func (w Window) Open(now time.Time) (bool, time.Time) {
	local := now.In(w.Location)
	// An occurrence that contains now opened today or yesterday (Duration ≤ 24 h).
	for back := 0; back <= 1; back++ {
		day := local.AddDate(0, 0, -back)
		if !w.onDay(day.Weekday()) {
			continue
		}
		start := w.startOn(day)
		end := start.Add(w.Duration)
		if !now.Before(start) && now.Before(end) {
			return true, end
		}
	}
	return false, time.Time{}
}

// Next is the window's next opening at or after now.
func (w Window) Next(now time.Time) time.Time {
	local := now.In(w.Location)
	for ahead := 0; ahead <= 7; ahead++ {
		day := local.AddDate(0, 0, ahead)
		if !w.onDay(day.Weekday()) {
			continue
		}
		if start := w.startOn(day); !start.Before(now) {
			return start
		}
	}
	return time.Time{} // no days: never
}

// Open reports whether moves may start at now; until is when the open window closes (zero
// when Always), next the next opening when closed (zero when there is none).
func (s Schedule) Open(now time.Time) (open bool, until, next time.Time) {
	if s.Always {
		return true, time.Time{}, time.Time{}
	}
	for _, w := range s.Windows {
		if ok, end := w.Open(now); ok {
			if !open || end.After(until) {
				until = end
			}
			open = true
		}
	}
	if open {
		return true, until, time.Time{}
	}
	for _, w := range s.Windows {
		if n := w.Next(now); !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return false, time.Time{}, next
}

// CoolDown is the wait after the failures-th failed try in a row: initial, doubling, capped at
// max; 0 before any failure.
func CoolDown(failures int, initial, max time.Duration) time.Duration {
	if failures <= 0 {
		return 0
	}
	d := initial
	for i := 1; i < failures; i++ {
		d *= 2
		if d >= max {
			return max
		}
	}
	return min(d, max)
}
