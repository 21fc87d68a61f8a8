package toolbox

import (
	"strings"
	"testing"
)

func TestParseEmail(t *testing.T) {
	multi := "From: Shop <shop@example.com>\r\nTo: a@example.com, \"B\" <b@example.com>\r\nSubject: =?UTF-8?B?Q2Fmw6k=?=\r\n" +
		"Date: Mon, 02 Jan 2026 15:04:05 +0000\r\nMIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=XX\r\n\r\n" +
		"--XX\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nHello =3D world\r\n" +
		"--XX\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\nPGI+SGk8L2I+\r\n--XX--\r\n"
	e := parseEmail("1795309025678464714-37", []byte(multi))
	if e.From != "Shop <shop@example.com>" || e.Subject != "Café" || len(e.To) != 2 || e.To[0] != "a@example.com" ||
		!strings.HasPrefix(e.Text, "Hello = world") || e.HTML != "<b>Hi</b>" || e.Date.Year() != 2026 {
		t.Fatalf("%+v", e)
	}
	junk := parseEmail("12-1", []byte("not a mail at all"))
	if junk.Text == "" || junk.ID != "12-1" {
		t.Fatalf("%+v", junk)
	}
}
