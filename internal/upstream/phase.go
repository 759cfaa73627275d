package upstream

import (
	"context"
	"fmt"
	"time"
)

// PhaseStart returns the first instant at or after now that lies phase
// into a whole second of the Unix clock: the instant a sender should start
// at so that it meets the simulator's clock-aligned windows (fixed
// windows, the sliding counter's buckets: [windowStart]) at a chosen
// place instead of wherever its setup happened to end. phase must be in
// [0, 1s); see [CheckPhase].
func PhaseStart(now time.Time, phase time.Duration) time.Time {
	sec := now.UnixNano() - now.UnixNano()%int64(time.Second)
	at := time.Unix(0, sec+int64(phase)).In(now.Location())
	if at.Before(now) {
		at = at.Add(time.Second)
	}
	return at
}

// CheckPhase returns an error unless phase is a valid start phase, in
// [0, 1s).
func CheckPhase(phase time.Duration) error {
	if phase < 0 || phase >= time.Second {
		return fmt.Errorf("start phase %v: want 0 to 999ms", phase)
	}
	return nil
}

// StartScheduleAt waits until [PhaseStart] of the server's clock and
// phase, starts the schedule of limit changes there ([Server.StartSchedule])
// and returns that instant, the run's start: a benchmark starts its
// senders as soon as it returns and measures makespans and ideals from
// the returned time, so every sender of a comparison meets the upstream's
// second at the same phase. It waits at most a second; it returns ctx's
// error, or an error when the server closes, without starting the
// schedule. Senders in another process use POST /_schedule?phase=250ms.
func (s *Server) StartScheduleAt(ctx context.Context, phase time.Duration) (time.Time, error) {
	if err := CheckPhase(phase); err != nil {
		return time.Time{}, err
	}
	now := s.cfg.Now()
	at := PhaseStart(now, phase)
	if !s.wait(ctx, at.Sub(now)) {
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		return time.Time{}, fmt.Errorf("upstream: closed while waiting for the start phase")
	}
	s.StartSchedule(at)
	return at, nil
}
