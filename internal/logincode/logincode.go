// Package logincode derives the short code a command-line login shows
// in the terminal and the consent page shows beside the Approve button:
// both come from the flow's PKCE challenge, so a person approves only the
// login they started, not one a local process or a phishing link started
// with a client name of its choosing.
package logincode

import (
	"crypto/sha256"
	"encoding/base32"
)

// Of is the code of a PKCE challenge, as XXXX-XXXX (base32 letters and
// digits, no padding).
func Of(challenge string) string {
	sum := sha256.Sum256([]byte("sandboxd login code\x00" + challenge))
	s := base32.StdEncoding.EncodeToString(sum[:5])
	return s[:4] + "-" + s[4:8]
}
