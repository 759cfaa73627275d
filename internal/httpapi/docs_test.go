package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/prometheus/client_golang/prometheus"
)

// TestOpenAPIValid checks the served OpenAPI document with a real OpenAPI
// 3.1 validator (pb33f/libopenapi-validator, against the specification's
// JSON Schema), and that it lists exactly the routes the server serves.
func TestOpenAPIValid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do("GET", "/v1/openapi.json", "", nil).want(t, 200)
	doc, err := libopenapi.NewDocument(r.body)
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetSpecInfo().Version; v != "3.1.0" {
		t.Fatalf("OpenAPI version %q, want 3.1.0", v)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, ve := range verrs {
			t.Errorf("%s: %s (%s)", ve.Message, ve.Reason, ve.HowToFix)
		}
		t.FailNow()
	}

	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	r.json(t, &spec)
	var documented []string
	for path, ops := range spec.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(documented)
	if served := e.srv.sortedPatterns(); !slices.Equal(documented, served) {
		t.Fatalf("OpenAPI paths and routes differ:\ndocumented %v\nserved     %v", documented, served)
	}
	var d discovery
	e.do("GET", "/v1", "", nil).want(t, 200).json(t, &d)
	var listed []string
	for _, c := range d.Capabilities {
		listed = append(listed, c.Method+" "+c.Path)
	}
	slices.Sort(listed)
	if served := e.srv.sortedPatterns(); !slices.Equal(listed, served) {
		t.Fatalf("discovery capabilities and routes differ:\nlisted %v\nserved %v", listed, served)
	}
}

// exampleEnv prepares what one capability's curl example needs (a job, a
// lease, a dead letter, a key) and returns its shell variables.
func (e *env) exampleEnv(c capability) map[string]string {
	e.t.Helper()
	e.clock.Add(time.Minute) // let pauses from earlier examples pass
	key := map[string]string{"producer": acmeKey, "worker": workerKey, "admin": adminKey, "public": ""}[c.Role]
	vars := map[string]string{"RATELANE_URL": e.hs.URL, "RATELANE_API_KEY": key}
	region := e.srv.regions[0]
	switch c.Name {
	case "getJob", "cancelJob":
		vars["JOB_ID"] = e.createJob(acmeKey, jobBody("email.send", region)).ID
	case "createLease":
		e.createJob(acmeKey, jobBody("email.send", region))
	case "heartbeatJob", "completeJob", "failJob", "rateLimitedJob", "completeLeases":
		e.createJob(acmeKey, jobBody("email.send", region))
		l := e.lease(region, 1, "email.send")
		if len(l) != 1 {
			e.t.Fatalf("%s: no job to lease", c.Name)
		}
		vars["JOB_ID"], vars["LEASE_TOKEN"] = l[0].ID, l[0].LeaseToken
	case "redriveDeadLetter", "deleteDeadLetter":
		j := e.createJob(acmeKey, jobBody("email.send", region))
		e.do("POST", "/v1/jobs/"+j.ID+"/cancel", acmeKey, nil).want(e.t, 200)
		vars["DEAD_JOB_ID"] = j.ID
	case "getLimit":
		e.do("PUT", "/v1/limits/openai:gpt-4o-mini?region="+region, adminKey, map[string]any{"per_second": 5}).want(e.t, 200)
	case "getSchedule", "putSchedule", "pauseSchedule", "resumeSchedule", "deleteSchedule":
		vars["SCHEDULE_ID"] = e.createSchedule(region, c.Name).ID
		if c.Name == "resumeSchedule" {
			e.do("POST", "/v1/schedules/"+vars["SCHEDULE_ID"]+"/pause", acmeKey, nil).want(e.t, 200)
		}
	case "revokeKey":
		var k createKeyResponse
		e.do("POST", "/v1/keys", adminKey, map[string]any{"tenant": "acme", "role": "worker"}).want(e.t, 201).json(e.t, &k)
		vars["KEY_ID"] = k.Key.ID
	}
	for _, need := range c.ExampleNeeds {
		if _, ok := vars[need]; !ok {
			e.t.Fatalf("%s: the example needs $%s, which the test does not provide", c.Name, need)
		}
	}
	return vars
}

func (e *env) capabilities() []capability {
	var d discovery
	e.do("GET", "/v1", "", nil).want(e.t, 200).json(e.t, &d)
	return d.Capabilities
}

// TestDiscoveryExamplesRun runs every curl example of GET /v1 against a
// live server and expects a 2xx for each. It executes the examples with
// sh and curl when curl is installed, and otherwise parses each example
// into an http.Request (parseCurl) and sends that.
func TestDiscoveryExamplesRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.Gatherer = prometheus.NewRegistry() })
	_, err := exec.LookPath("curl")
	useCurl := err == nil
	t.Logf("running examples with curl: %v", useCurl)
	for _, c := range e.capabilities() {
		vars := e.exampleEnv(c)
		var status int
		if useCurl {
			status = runCurl(t, c.Example, vars)
		} else {
			status = e.send(parseCurlT(t, c.Example, vars)).status
		}
		if status < 200 || status > 299 {
			t.Errorf("%s: %s answered %d", c.Name, c.Example, status)
		}
	}
}

// TestDiscoveryExamplesMatchOpenAPI parses every example into a request,
// sends it and validates the request and the response against the OpenAPI
// document, so the documented schemas are the ones the server speaks.
func TestDiscoveryExamplesMatchOpenAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.Gatherer = prometheus.NewRegistry() })
	doc, err := libopenapi.NewDocument(e.do("GET", "/v1/openapi.json", "", nil).body)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, c := range e.capabilities() {
		req := parseCurlT(t, c.Example, e.exampleEnv(c))
		e.sendValidated(t, v, c.Name, req)
	}
}

func runCurl(t *testing.T, example string, vars map[string]string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", example+` -o /dev/null -w '%{http_code}'`)
	cmd.Env = os.Environ()
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", example, err)
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("%s: curl printed %q", example, out)
	}
	return code
}

// documentedRoutes checks that the served OpenAPI document is valid and
// that discovery lists exactly the served routes, and returns a validator
// for the document.
func (e *env) documentedRoutes(t *testing.T) validator.Validator {
	t.Helper()
	doc, err := libopenapi.NewDocument(e.do("GET", "/v1/openapi.json", "", nil).want(t, 200).body)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		t.Fatalf("invalid OpenAPI document: %v", verrs)
	}
	var listed []string
	for _, c := range e.capabilities() {
		listed = append(listed, c.Method+" "+c.Path)
	}
	slices.Sort(listed)
	if served := e.srv.sortedPatterns(); !slices.Equal(listed, served) {
		t.Fatalf("discovery and routes differ:\nlisted %v\nserved %v", listed, served)
	}
	return v
}

// sendValidated sends an example's request and validates the request and
// its answer against the OpenAPI document v was built from; a status
// outside 2xx fails the example without validating it.
func (e *env) sendValidated(t *testing.T, v validator.Validator, name string, req *http.Request) {
	t.Helper()
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(body))
	resp := e.send(req)
	if resp.status < 200 || resp.status > 299 {
		t.Errorf("%s answered %d: %s", name, resp.status, resp.body)
		return
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	hr := &http.Response{StatusCode: resp.status, Header: resp.header, Body: io.NopCloser(bytes.NewReader(resp.body)), Request: req}
	if ok, verrs := v.ValidateHttpRequestResponse(req, hr); !ok {
		for _, ve := range verrs {
			t.Errorf("%s: %s: %s", name, ve.Message, ve.Reason)
		}
	}
}

func (e *env) send(req *http.Request) response {
	e.t.Helper()
	resp, err := e.hs.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

func parseCurlT(t *testing.T, example string, vars map[string]string) *http.Request {
	t.Helper()
	req, err := parseCurl(example, vars)
	if err != nil {
		t.Fatalf("%s: %v", example, err)
	}
	return req
}

// parseCurl turns one of the discovery document's curl examples into a
// request: it splits words as sh does for the quoting the examples use
// ('...', "..." and $VAR expansion) and reads -X, -H and -d.
func parseCurl(example string, vars map[string]string) (*http.Request, error) {
	words, err := shellWords(example, vars)
	if err != nil {
		return nil, err
	}
	if len(words) == 0 || words[0] != "curl" {
		return nil, fmt.Errorf("not a curl command")
	}
	method, url, body := "", "", ""
	hdr := http.Header{}
	for i := 1; i < len(words); i++ {
		switch w := words[i]; w {
		case "-sS", "-s", "-S":
		case "-X", "-H", "-d":
			if i+1 >= len(words) {
				return nil, fmt.Errorf("%s needs an argument", w)
			}
			i++
			switch w {
			case "-X":
				method = words[i]
			case "-H":
				k, v, _ := strings.Cut(words[i], ":")
				hdr.Add(strings.TrimSpace(k), strings.TrimSpace(v))
			case "-d":
				body = words[i]
			}
		default:
			if strings.HasPrefix(w, "-") {
				return nil, fmt.Errorf("unsupported curl option %s", w)
			}
			url = w
		}
	}
	if method == "" {
		method = "GET"
		if body != "" {
			method = "POST"
		}
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = hdr
	return req, nil
}

// shellWords splits s into words like sh: single quotes are literal,
// double quotes expand $VAR, adjacent quoted parts join into one word.
func shellWords(s string, vars map[string]string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	expand := func(i int) int {
		j := i + 1
		for j < len(s) && (s[j] == '_' || unicode.IsUpper(rune(s[j])) || unicode.IsDigit(rune(s[j]))) {
			j++
		}
		cur.WriteString(vars[s[i+1:j]])
		return j
	}
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
			i++
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unterminated single quote")
			}
			cur.WriteString(s[i+1 : i+1+end])
			i, inWord = i+end+2, true
		case c == '"':
			i, inWord = i+1, true
			for i < len(s) && s[i] != '"' {
				switch {
				case s[i] == '\\' && i+1 < len(s):
					cur.WriteByte(s[i+1])
					i += 2
				case s[i] == '$':
					i = expand(i)
				default:
					cur.WriteByte(s[i])
					i++
				}
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated double quote")
			}
			i++
		case c == '$':
			i, inWord = expand(i), true
		default:
			cur.WriteByte(c)
			i, inWord = i+1, true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// sortedPatterns lists the served route patterns.
func (s *Server) sortedPatterns() []string {
	out := make([]string, len(s.table))
	for i, rt := range s.table {
		out[i] = rt.pattern()
	}
	slices.Sort(out)
	return out
}
