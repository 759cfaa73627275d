package upstream

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/testkit"
)

func TestPhaseStart(t *testing.T) {
	t.Parallel()
	sec := time.Date(2026, 12, 4, 21, 0, 7, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		now   time.Duration // into sec
		phase time.Duration
		want  time.Duration // into sec
	}{
		{0, 0, 0},                        // on the phase already: no wait
		{ms(1), 0, time.Second},          // just past it: the next second
		{ms(100), ms(250), ms(250)},      // later in this second
		{ms(250), ms(250), ms(250)},      // exactly on it
		{ms(300), ms(250), ms(1250)},     // past it: the next second's
		{ms(999), ms(333), ms(1333)},     // from the end of a second
		{ms(400), ms(999), ms(999)},      // the last valid phase
		{ms(667) + 1, ms(667), ms(1667)}, // a nanosecond late is late
		{ms(5) + 123, ms(500), ms(500)},  // sub-millisecond now
		{-ms(1), ms(900), ms(900)},       // from just before sec: the phase of sec
	} {
		now := sec.Add(tc.now)
		got := PhaseStart(now, tc.phase)
		if want := sec.Add(tc.want); !got.Equal(want) {
			t.Errorf("PhaseStart(sec+%v, %v) = sec+%v, want sec+%v", tc.now, tc.phase, got.Sub(sec), tc.want)
		}
		if got.Before(now) || got.Sub(now) >= time.Second {
			t.Errorf("PhaseStart(sec+%v, %v): waits %v, want [0, 1s)", tc.now, tc.phase, got.Sub(now))
		}
		if got.Nanosecond() != int(tc.phase) {
			t.Errorf("PhaseStart(sec+%v, %v) lies %v into its second", tc.now, tc.phase, time.Duration(got.Nanosecond()))
		}
	}
	for _, bad := range []time.Duration{-1, time.Second, 2 * time.Second} {
		if CheckPhase(bad) == nil {
			t.Errorf("CheckPhase(%v) = nil, want an error", bad)
		}
	}
}

// TestStartScheduleAt: in a testing/synctest bubble (fake clock, which
// starts on a whole second), the schedule starts at the requested phase
// of the next second, both in process and through POST /_schedule; an
// invalid phase is refused and a cancelled wait starts nothing.
func TestStartScheduleAt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pipes := testkit.NewPipes()
		client, transport := pipes.Client()
		sim, err := New(Config{Listener: pipes, Routes: map[string]RouteConfig{"f": {
			Algorithm: AlgorithmFixedWindow, Window: time.Second, Limit: 1, OverLimit: OverLimit429Seconds}}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			transport.CloseIdleConnections()
			sim.Close()
		}()
		base := time.Now()
		if base.Nanosecond() != 0 {
			t.Fatalf("the bubble's clock starts %v into a second; the test assumes a whole second", time.Duration(base.Nanosecond()))
		}
		time.Sleep(400 * time.Millisecond)
		at, err := sim.StartScheduleAt(context.Background(), 250*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if want := base.Add(1250 * time.Millisecond); !at.Equal(want) || !time.Now().Equal(want) {
			t.Fatalf("StartScheduleAt(250ms) from base+400ms = base+%v at base+%v, want base+1.25s both", at.Sub(base), time.Since(base))
		}
		if !sim.ScheduleEpoch().Equal(at) {
			t.Errorf("ScheduleEpoch = base+%v, want base+%v", sim.ScheduleEpoch().Sub(base), at.Sub(base))
		}

		// Over HTTP, as the BullMQ runner does.
		time.Sleep(600 * time.Millisecond) // base+1.85s
		post := func(query string) (int, time.Time) {
			t.Helper()
			resp, err := client.Post(sim.URL()+"/_schedule"+query, "application/json", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct{ Epoch time.Time }
			_ = json.NewDecoder(resp.Body).Decode(&body)
			return resp.StatusCode, body.Epoch
		}
		code, epoch := post("?phase=667ms")
		if want := base.Add(2667 * time.Millisecond); code != http.StatusOK || !epoch.Equal(want) || !time.Now().Equal(want) {
			t.Fatalf("POST /_schedule?phase=667ms at base+1.85s: %d, epoch base+%v, answered at base+%v; want 200, base+2.667s both",
				code, epoch.Sub(base), time.Since(base))
		}
		if !sim.ScheduleEpoch().Equal(epoch) {
			t.Errorf("ScheduleEpoch = base+%v, want the answered epoch base+%v", sim.ScheduleEpoch().Sub(base), epoch.Sub(base))
		}
		for _, bad := range []string{"?phase=1s", "?phase=-1ms", "?phase=soon"} {
			if code, _ := post(bad); code != http.StatusBadRequest {
				t.Errorf("POST /_schedule%s: %d, want 400", bad, code)
			}
		}
		if !sim.ScheduleEpoch().Equal(epoch) {
			t.Errorf("a refused POST moved the epoch to base+%v", sim.ScheduleEpoch().Sub(base))
		}

		// A cancelled wait starts nothing.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := sim.StartScheduleAt(ctx, 0); err == nil {
			t.Errorf("StartScheduleAt with a context ending before the phase: nil error")
		}
		if !sim.ScheduleEpoch().Equal(epoch) {
			t.Errorf("a cancelled StartScheduleAt moved the epoch to base+%v", sim.ScheduleEpoch().Sub(base))
		}
	})
}
