package webhooks

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/webhook"
)

// secretEnv is where the webhook command reads a secret the --secret flag
// does not give, so that it need not appear in a process listing.
const secretEnv = "RATELANE_WEBHOOK_SECRET"

// Commands returns the plug-in's commands of the ratelane binary
// (ratelane.Commander): webhook, the offline Standard Webhooks tools a
// receiver's author needs (a new secret, signing a body, verifying one),
// with no server. The server-side verbs (ratelane subscribers|events|
// deliveries) are clients of the routes and live with the binary's other
// API clients, as the review plug-in's do.
func (p *Plugin) Commands() []ratelane.Command {
	return []ratelane.Command{{Name: "webhook", Summary: "Standard Webhooks tools with no server: new secret, sign and verify a body", Run: runWebhook}}
}

// usageError is a command-line mistake: the binary exits 2.
type usageError string

func (e usageError) Error() string { return string(e) }

// Is makes a usageError match ratelane.ErrUsage.
func (usageError) Is(target error) bool { return target == ratelane.ErrUsage }

const webhookUsage = `usage: ratelane webhook secret
       ratelane webhook sign   [--secret whsec_...] [--id ID] [--timestamp UNIX] [FILE|-]
       ratelane webhook verify [--secret whsec_...] --id ID --timestamp UNIX --signature SIG [--tolerance 5m] [FILE|-]

The secret comes from --secret or $` + secretEnv + `; the body from FILE or standard input.`

func runWebhook(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError(webhookUsage)
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprintln(stderr, webhookUsage)
		return nil
	case "secret":
		if len(args) > 1 {
			return usageError("webhook secret takes no arguments")
		}
		fmt.Fprintln(stdout, webhook.NewSecret())
		return nil
	case "sign", "verify":
	default:
		return usageError(fmt.Sprintf("unknown webhook command %q\n%s", args[0], webhookUsage))
	}
	verb := args[0]
	fs := flag.NewFlagSet("webhook "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	secret := fs.String("secret", "", "the whsec_ signing secret; default $"+secretEnv)
	id := fs.String("id", "", "the webhook-id (sign: default msg_<unix nanoseconds>)")
	ts := fs.Int64("timestamp", 0, "the webhook-timestamp, Unix seconds (sign: default now)")
	sig := fs.String("signature", "", "verify: the webhook-signature header value")
	tolerance := fs.Duration("tolerance", webhook.DefaultTolerance, "verify: the accepted clock skew of the timestamp")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError(err.Error())
	}
	if *secret == "" {
		*secret = os.Getenv(secretEnv)
	}
	if *secret == "" {
		return usageError("a secret is required: --secret whsec_... or $" + secretEnv)
	}
	body, err := readBody(fs, stdin)
	if err != nil {
		return err
	}
	now := time.Now()
	if verb == "sign" {
		if *id == "" {
			*id = "msg_" + strconv.FormatInt(now.UnixNano(), 10)
		}
		at := now
		if *ts != 0 {
			at = time.Unix(*ts, 0)
		}
		s, err := webhook.Sign(*secret, *id, at, body)
		if err != nil {
			return err // names the secret's fault, never the secret
		}
		fmt.Fprintf(stdout, "%s: %s\n%s: %d\n%s: %s\n", webhook.HeaderID, *id, webhook.HeaderTimestamp, at.Unix(), webhook.HeaderSignature, s)
		return nil
	}
	if *id == "" || *ts == 0 || *sig == "" {
		return usageError("webhook verify needs --id, --timestamp and --signature")
	}
	h := http.Header{}
	h.Set(webhook.HeaderID, *id)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(*ts, 10))
	h.Set(webhook.HeaderSignature, *sig)
	if err := webhook.Verify([]string{*secret}, h, body, now, *tolerance); err != nil {
		return fmt.Errorf("webhook verify: %w", err)
	}
	fmt.Fprintln(stdout, "valid")
	return nil
}

// readBody reads the body to sign or verify from the one FILE argument,
// or standard input for none or "-".
func readBody(fs *flag.FlagSet, stdin io.Reader) ([]byte, error) {
	switch {
	case fs.NArg() > 1:
		return nil, usageError(fmt.Sprintf("unexpected argument %q", fs.Arg(1)))
	case fs.NArg() == 1 && fs.Arg(0) != "-":
		return os.ReadFile(fs.Arg(0))
	}
	return io.ReadAll(stdin)
}
