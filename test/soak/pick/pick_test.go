package pick

import (
	"testing"
	"time"
)

func days(m map[int64]Day) func(int64) Day {
	return func(s int64) Day {
		d, ok := m[s]
		if !ok {
			d = Day{Kinds: []string{"scale-in"}, Length: 5 * time.Minute}
		}
		d.Seed = s
		return d
	}
}

func TestNextPrefersUnplayedKinds(t *testing.T) {
	c := New(1, 4, days(map[int64]Day{
		1: {Kinds: []string{"scale-in"}, Length: 5 * time.Minute},
		2: {Kinds: []string{"scale-in", "crash"}, Length: 5 * time.Minute},
		3: {Kinds: []string{"hibernate", "spot", "crash"}, Length: 5 * time.Minute},
		4: {Kinds: []string{"crash"}, Length: 5 * time.Minute},
	}))
	var got []int64
	for range 4 {
		d, ok := c.Next(time.Hour)
		if !ok {
			t.Fatal("no day fits an hour")
		}
		got = append(got, d.Seed)
	}
	// 3 (three kinds new), then 1 (scale-in new; 2's crash is played), then
	// 2 (its kinds played, earliest of the rest with 5's and 6's), then 4
	want := []int64{3, 1, 2, 4}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("picked %v, want %v", got, want)
		}
	}
}

func TestNextOnlyWhatFits(t *testing.T) {
	c := New(1, 3, days(map[int64]Day{
		1: {Kinds: []string{"crash"}, Length: 9 * time.Minute},
		2: {Kinds: []string{"scale-in"}, Length: 4 * time.Minute},
		3: {Kinds: []string{"stop"}, Length: 12 * time.Minute},
	}))
	d, ok := c.Next(5 * time.Minute)
	if !ok || d.Seed != 2 {
		t.Fatalf("with 5 minutes left: %+v %v, want seed 2", d, ok)
	}
	if d, ok := c.Next(3 * time.Minute); ok {
		t.Fatalf("with 3 minutes left, %+v picked: no day that short", d)
	}
	if d, ok := c.Next(10 * time.Minute); !ok || d.Seed != 1 {
		t.Fatalf("with 10 minutes left: %+v %v, want seed 1 (crash, not played)", d, ok)
	}
}

func TestNextPrefers(t *testing.T) {
	c := New(1, 2, days(map[int64]Day{
		7:  {Kinds: []string{"unready"}, Length: 5 * time.Minute},
		40: {Kinds: []string{"unready", "crash"}, Length: 5 * time.Minute},
	}))
	c.Prefer = []string{"unready"}
	for _, want := range []int64{7, 40} {
		d, ok := c.Next(time.Hour)
		if !ok || d.Seed != want {
			t.Fatalf("preferring unready: %+v %v, want seed %d (read ahead past the window)", d, ok, want)
		}
	}
	if d, ok := c.Next(time.Hour); ok {
		t.Fatalf("no more unready day within 100 windows, yet %+v picked", d)
	}
}
