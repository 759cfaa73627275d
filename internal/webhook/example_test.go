package webhook_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratelane/ratelane/internal/webhook"
)

// The Standard Webhooks specification's test vector, signed and verified.
func ExampleSign() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	ts := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)
	sig, err := webhook.Sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", ts, body)
	if err != nil {
		panic(err)
	}
	fmt.Println(sig)

	h := http.Header{}
	h.Set(webhook.HeaderID, "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set(webhook.HeaderTimestamp, "1614265330")
	h.Set(webhook.HeaderSignature, sig)
	fmt.Println(webhook.Verify([]string{secret}, h, body, ts.Add(time.Minute), 0))
	// Output:
	// v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
	// <nil>
}

// During a rotation both secrets sign, so the receiver may switch at any
// time within the window.
func ExampleSecrets_Active() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := webhook.Secrets{Current: "whsec_old"}.Rotate("whsec_new", now, time.Hour)
	fmt.Println(s.Active(now.Add(30 * time.Minute)))
	fmt.Println(s.Active(now.Add(2 * time.Hour)))
	// Output:
	// [whsec_new whsec_old]
	// [whsec_new]
}
