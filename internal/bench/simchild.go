package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/idlethread"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/internal/upstream/batchsim"
)

// Where the batch-isolation workload's simulators run (Options.Sim).
const (
	// SimInProcess runs the LLM and batch simulators in the bench's own
	// process: their CPU competes with the interactive reviews inside one
	// Go scheduler (and its garbage collector), which a remote provider's
	// does not.
	SimInProcess = "in"
	// SimChild runs them in a child process on loopback, killed when the
	// workload ends: they still share the machine's cores, but not the
	// bench's scheduler, heap or CPU figures.
	SimChild = "child"
)

// Where the batch simulator runs when the simulators run in a child
// process (Options.BatchSim, SimChild only).
const (
	// BatchSimShared serves the batch simulator from the one simulator
	// child, beside the LLM simulator, at the child's priority (--sim-nice).
	BatchSimShared = "shared"
	// BatchSimIdle serves it from a child process of its own whose every
	// thread is on SCHED_IDLE (Linux, sched(7)): the kernel gives it a core
	// only when no normal thread wants one, so the provider's batch CPU
	// (remote in reality) does not compete with the interactive reviews on
	// the bench's cores; the LLM simulator, which answers those reviews,
	// stays in the normal-priority child.
	BatchSimIdle = "idle"
)

// SimChildEnv, set in a process's environment, makes ServeSimChildIfAsked
// serve the batch-isolation simulators instead of running the program: its
// value is the batch simulator's ProcessFor (a Go duration). The bench sets
// it on the child it starts from its own executable, so a test binary and
// the ratelane binary both work as the child.
const SimChildEnv = "RATELANE_BENCH_SIMULATORS"

// SimServesEnv, set beside SimChildEnv, names the one simulator the child
// serves: "llm" or "batch" (BatchSimIdle's two children); unset, it
// serves both.
const SimServesEnv = "RATELANE_BENCH_SIM_SERVES"

// The values of SimServesEnv.
const (
	simServesLLM   = "llm"
	simServesBatch = "batch"
)

// simURLs is the child's one line on stdout: its LLM simulator's base URL
// for route "openai" and its batch simulator's (empty for one it does not
// serve, SimServesEnv).
type simURLs struct {
	LLM   string `json:"llm"`
	Batch string `json:"batch"`
}

// ServeSimChildIfAsked returns at once unless SimChildEnv, BatchNodeEnv or
// BurnChildEnv is set; then it serves the simulators, a batch-only node
// (BatchNodeProcess) or a CPU burner (batch-floor), until its stdin closes (the parent ends it, or
// died) and exits the process. A main or TestMain calls it first.
func ServeSimChildIfAsked() {
	if v, ok := os.LookupEnv(BatchNodeEnv); ok {
		if err := serveBatchNode(v, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "bench batch node: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if _, ok := os.LookupEnv(BurnChildEnv); ok {
		if err := serveBurner(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "bench burner: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	v, ok := os.LookupEnv(SimChildEnv)
	if !ok {
		return
	}
	if err := serveSimChild(v, os.Getenv(SimServesEnv), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "bench simulators: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveSimChild serves the simulators (processFor: the batch simulator's
// ProcessFor; serves: SimServesEnv's value, "" for both), writes their
// URLs as one JSON line to out, and serves until in reaches its end.
func serveSimChild(processFor, serves string, in io.Reader, out io.Writer) error {
	pf, err := time.ParseDuration(processFor)
	if err != nil {
		return fmt.Errorf("%s=%q: %w", SimChildEnv, processFor, err)
	}
	var urls simURLs
	switch serves {
	case "":
		llm, bsim, err := newSims(pf)
		if err != nil {
			return err
		}
		defer llm.Close()
		defer bsim.Close()
		urls = simURLs{LLM: llm.LLMBaseURL("openai"), Batch: bsim.URL()}
	case simServesLLM:
		llm, err := newLLMSim()
		if err != nil {
			return err
		}
		defer llm.Close()
		urls.LLM = llm.LLMBaseURL("openai")
	case simServesBatch:
		bsim, err := newBatchSim(pf)
		if err != nil {
			return err
		}
		defer bsim.Close()
		urls.Batch = bsim.URL()
	default:
		return fmt.Errorf("%s=%q: want %s, %s or nothing", SimServesEnv, serves, simServesLLM, simServesBatch)
	}
	line, err := json.Marshal(urls)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "%s\n", line); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, in)
	return err
}

// newSims starts the workload's LLM simulator (no routes: every route
// unlimited) and batch simulator on loopback.
func newSims(processFor time.Duration) (*upstream.Server, *batchsim.Server, error) {
	llm, err := newLLMSim()
	if err != nil {
		return nil, nil, err
	}
	bsim, err := newBatchSim(processFor)
	if err != nil {
		_ = llm.Close()
		return nil, nil, err
	}
	return llm, bsim, nil
}

// newLLMSim starts the workload's LLM simulator (no routes: every route
// unlimited) on loopback.
func newLLMSim() (*upstream.Server, error) { return upstream.New(upstream.Config{Seed: 1}) }

// newBatchSim starts the workload's batch simulator on loopback, each
// provider batch processed over processFor.
func newBatchSim(processFor time.Duration) (*batchsim.Server, error) {
	return batchsim.New(batchsim.Config{ValidateFor: 100 * time.Millisecond, ProcessFor: processFor,
		FinalizeFor: 100 * time.Millisecond, CancelFor: 100 * time.Millisecond, Responder: upstream.DefaultResponder})
}

// selfChild is a child process of this executable (the bench's
// simulators, or a batch node): closing its stdin asks it to end.
type selfChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser // a burner child (batch-floor) reads its rates here
	// niceNote says how the child's priority was set (or why not).
	niceNote string
	// idleNote says how the child was put on SCHED_IDLE (childSpec.idle),
	// or why not; empty for a child not asked to be.
	idleNote string
}

// childSpec says what startChild starts: what names the child in errors,
// env are the NAME=value pairs added to the bench's environment, nice its
// nice (0: the bench's priority), idle whether its every thread runs on
// SCHED_IDLE (startIdle), grace how long it has to exit once its stdin
// closed before it is killed.
type childSpec struct {
	what  string
	env   []string
	nice  int
	idle  bool
	grace time.Duration
}

// startSelf starts this executable with env (NAME=value) added at nice
// (startChild).
func startSelf(what, env string, nice int, grace time.Duration, ready func(line string) error) (*selfChild, error) {
	return startChild(childSpec{what: what, env: []string{env}, nice: nice, grace: grace}, ready)
}

// startChild starts this executable as sp says, and hands the first line
// the child writes on stdout to ready, which says whether the child is
// serving. It renices the child at once and again once it serves: the
// threads its runtime makes later inherit the nice of the thread that
// makes them (a refused nice is not an error; niceNote says so). A child
// that does not get that far is closed (killed sp.grace after its stdin
// closed) and the error names what and the line.
func startChild(sp childSpec, ready func(line string) error) (*selfChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sp.what, err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), sp.env...)
	cmd.Stderr = os.Stderr // an *os.File: no copying goroutine
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	start, idleNote := cmd.Start, ""
	if sp.idle {
		start = func() error {
			var err error
			idleNote, err = startIdle(cmd)
			return err
		}
	}
	if err := start(); err != nil {
		return nil, fmt.Errorf("%s: %w", sp.what, err)
	}
	c := &selfChild{cmd: cmd, stdin: stdin, niceNote: renice(cmd.Process.Pid, sp.nice), idleNote: idleNote}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err == nil {
		err = ready(line)
	}
	if err != nil {
		_ = c.close(sp.grace)
		return nil, fmt.Errorf("%s: its first line %q: %w", sp.what, line, err)
	}
	c.niceNote = renice(cmd.Process.Pid, sp.nice)
	return c, nil
}

// startIdle starts cmd from a thread on SCHED_IDLE (idlethread.Enter), and
// says how. A forked process inherits the policy of the thread that forked
// it, exec keeps it, and every thread the child's runtime makes later
// inherits it from the thread that makes it, all of which descend from
// the first: so the child's every thread is idle from its first
// instruction, with no pass over its tasks to race the threads it makes
// meanwhile (renice's problem). The goroutine that entered ends after the
// start; where the kernel does not let its thread leave SCHED_IDLE (not
// root), the thread ends with it (idlethread.Leave). Where SCHED_IDLE is
// not to be had (not Linux, or refused) the child starts at the bench's
// priority and the note says why.
func startIdle(cmd *exec.Cmd) (note string, err error) {
	type started struct {
		note string
		err  error
	}
	done := make(chan started, 1)
	go func() {
		t, err := idlethread.Enter()
		if err != nil {
			done <- started{note: fmt.Sprintf("not idle: %v", err), err: cmd.Start()}
			return
		}
		err = cmd.Start()
		t.Leave()
		done <- started{note: "started from a SCHED_IDLE thread", err: err}
	}()
	s := <-done
	return s.note, s.err
}

// close ends the child: its stdin closes (it exits by itself), and a kill
// follows in case it has not within grace.
func (c *selfChild) close(grace time.Duration) error {
	_ = c.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		return <-done
	}
}

// simChild is a running child process serving the simulators.
type simChild struct {
	*selfChild
	urls simURLs
}

// startSimChild starts this executable as the simulators' child (see
// SimChildEnv), serving both simulators, at nice (0: the bench's
// priority; Options.SimNice) and waits for its URLs. A nice the OS
// refuses leaves the child at the bench's priority and says so in
// niceNote; it is not an error.
func startSimChild(processFor time.Duration, nice int) (*simChild, error) {
	return startSimChildOf(processFor, "", nice, false)
}

// startSimChildOf starts a simulator child serving serves (SimServesEnv:
// simServesLLM, simServesBatch, or "" for both) at nice, its every thread
// on SCHED_IDLE when idle (startIdle; where refused it runs at the
// bench's priority and idleNote says why), and waits for the URLs of what
// it serves.
func startSimChildOf(processFor time.Duration, serves string, nice int, idle bool) (*simChild, error) {
	c := &simChild{}
	env := []string{SimChildEnv + "=" + processFor.String()}
	what := "simulator child"
	if serves != "" {
		env = append(env, SimServesEnv+"="+serves)
		what = serves + " " + what
	}
	sc, err := startChild(childSpec{what: what, env: env, nice: nice, idle: idle, grace: simChildGrace}, func(line string) error {
		if err := json.Unmarshal([]byte(line), &c.urls); err != nil {
			return err
		}
		if (serves != simServesBatch && c.urls.LLM == "") || (serves != simServesLLM && c.urls.Batch == "") {
			return errors.New("no URLs")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.selfChild = sc
	return c, nil
}

// simChildGrace is how long a closed simulator child has to exit before
// it is killed.
const simChildGrace = 5 * time.Second

// close ends the child, killed if it has not exited simChildGrace after
// its stdin closed.
func (c *simChild) close() error { return c.selfChild.close(simChildGrace) }

// cpuSeconds is the child's CPU time so far (procCPUSeconds).
func (c *simChild) cpuSeconds() (float64, bool) { return procCPUSeconds(c.cmd.Process.Pid) }

// procCPUSeconds is a process's CPU time (user + system) so far, from
// /proc/PID/stat; ok false where it cannot be read.
func procCPUSeconds(pid int) (float64, bool) {
	f, ok := statFields(fmt.Sprintf("/proc/%d/stat", pid))
	if !ok || len(f) < 13 {
		return 0, false
	}
	// utime and stime are fields 14 and 15, in clock ticks (USER_HZ,
	// 100 on Linux).
	u, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return (u + st) / 100, true
}

// statFields are the fields of a /proc stat file after the command name
// (which may hold spaces): field 3 on, so field k is at index k-3.
func statFields(path string) ([]string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(s[i+1:]), true
}
