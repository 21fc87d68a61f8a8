package urlrewrite

import (
	"strconv"
	"strings"
)

// maxDepth bounds nesting in serialized data (PHP's own default limit
// for unserialize is 4096; real options nest a few levels).
const maxDepth = 512

// serialized rewrites s when the whole of it is PHP serialize() output,
// and reports whether it was.
func (r *Rewriter) serialized(s string) (string, bool) {
	if !looksSerialized(s) {
		return "", false
	}
	w := &serialWriter{r: r, src: s}
	end, ok := w.value(0, 0)
	if !ok || strings.TrimSpace(s[end:]) != "" {
		return "", false
	}
	w.out.WriteString(s[end:])
	return w.out.String(), true
}

// looksSerialized is a cheap test of the first bytes.
func looksSerialized(s string) bool {
	if s == "N;" {
		return true
	}
	if len(s) < 4 || s[1] != ':' {
		return false
	}
	return strings.IndexByte("sabidOCE", s[0]) >= 0
}

// serialWriter copies a serialized value, rewriting the strings in it.
type serialWriter struct {
	r   *Rewriter
	src string
	out strings.Builder
}

// value reads one value at i and writes it rewritten; it returns the
// index after it.
func (w *serialWriter) value(i, depth int) (int, bool) {
	s := w.src
	if depth > maxDepth || i+1 >= len(s) {
		return 0, false
	}
	switch s[i] {
	case 'N':
		if s[i+1] != ';' {
			return 0, false
		}
		w.out.WriteString("N;")
		return i + 2, true
	case 'b', 'i', 'd', 'r', 'R':
		// scalar: x:...;
		if s[i+1] != ':' {
			return 0, false
		}
		end := strings.IndexByte(s[i:], ';')
		if end < 0 {
			return 0, false
		}
		if !validScalar(s[i], s[i+2:i+end]) {
			return 0, false
		}
		w.out.WriteString(s[i : i+end+1])
		return i + end + 1, true
	case 's':
		str, next, ok := readString(s, i+1)
		if !ok || next >= len(s) || s[next] != ';' {
			return 0, false
		}
		w.writeString(str)
		w.out.WriteByte(';')
		return next + 1, true
	case 'E':
		// enum: E:len:"Class:Case"; names never hold URLs
		_, next, ok := readString(s, i+1)
		if !ok || next >= len(s) || s[next] != ';' {
			return 0, false
		}
		w.out.WriteString(s[i : next+1])
		return next + 1, true
	case 'a':
		n, next, ok := readCount(s, i+1)
		if !ok {
			return 0, false
		}
		w.out.WriteString("a:" + strconv.Itoa(n) + ":{")
		return w.members(next, n, depth)
	case 'O':
		class, next, ok := readString(s, i+1)
		if !ok {
			return 0, false
		}
		n, next, ok := readCount(s, next)
		if !ok {
			return 0, false
		}
		w.out.WriteString("O:" + strconv.Itoa(len(class)) + `:"` + class + `":` + strconv.Itoa(n) + ":{")
		return w.members(next, n, depth)
	case 'C':
		// Serializable objects: C:len:"Class":len:{payload}; the payload
		// is the class's own format, rewritten as a value when it is
		// serialized data, else as text, and its length fixed.
		class, next, ok := readString(s, i+1)
		if !ok || next >= len(s) || s[next] != ':' {
			return 0, false
		}
		n, j, ok := readInt(s, next+1)
		if !ok || j+3+n > len(s) || s[j] != ':' || s[j+1] != '{' || s[j+2+n] != '}' {
			return 0, false
		}
		payload := w.r.mixed(s[j+2 : j+2+n])
		w.out.WriteString("C:" + strconv.Itoa(len(class)) + `:"` + class + `":` + strconv.Itoa(len(payload)) + ":{" + payload + "}")
		return j + 3 + n, true
	}
	return 0, false
}

// members copies n key/value pairs and the closing brace.
func (w *serialWriter) members(i, n, depth int) (int, bool) {
	s := w.src
	for range n {
		if i >= len(s) || (s[i] != 'i' && s[i] != 's') {
			return 0, false // keys are ints or strings
		}
		var ok bool
		if i, ok = w.value(i, depth+1); !ok {
			return 0, false
		}
		if i, ok = w.value(i, depth+1); !ok {
			return 0, false
		}
	}
	if i >= len(s) || s[i] != '}' {
		return 0, false
	}
	w.out.WriteByte('}')
	return i + 1, true
}

// writeString writes a string value rewritten: a string that is itself
// serialized data (WordPress double-serializes) structurally, any other
// as text; its length is the new byte length.
func (w *serialWriter) writeString(str string) {
	v := w.r.Value(str)
	w.out.WriteString("s:" + strconv.Itoa(len(v)) + `:"` + v + `"`)
}

// readString reads :len:"bytes" at i (just after the type letter) and
// returns the bytes and the index after the closing quote.
func readString(s string, i int) (string, int, bool) {
	if i >= len(s) || s[i] != ':' {
		return "", 0, false
	}
	n, j, ok := readInt(s, i+1)
	if !ok || j+2+n+1 > len(s) || s[j] != ':' || s[j+1] != '"' || s[j+2+n] != '"' {
		return "", 0, false
	}
	return s[j+2 : j+2+n], j + 3 + n, true
}

// readCount reads :n:{ at i and returns n and the index after the brace.
func readCount(s string, i int) (int, int, bool) {
	if i >= len(s) || s[i] != ':' {
		return 0, 0, false
	}
	n, j, ok := readInt(s, i+1)
	if !ok || j+1 >= len(s) || s[j] != ':' || s[j+1] != '{' {
		return 0, 0, false
	}
	return n, j + 2, true
}

// readInt reads a non-negative decimal at i.
func readInt(s string, i int) (int, int, bool) {
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' && j-i < 10 {
		j++
	}
	if j == i {
		return 0, 0, false
	}
	n, err := strconv.Atoi(s[i:j])
	if err != nil || n > len(s) {
		return 0, 0, false
	}
	return n, j, true
}

// validScalar checks the body of b:, i:, d:, r: and R: values.
func validScalar(kind byte, body string) bool {
	switch kind {
	case 'b':
		return body == "0" || body == "1"
	case 'd':
		if body == "INF" || body == "-INF" || body == "NAN" {
			return true
		}
		_, err := strconv.ParseFloat(body, 64)
		return err == nil
	default:
		_, err := strconv.ParseInt(body, 10, 64)
		return err == nil
	}
}

// maxMixed bounds the payloads mixed searches for embedded values.
const maxMixed = 1 << 20

// mixed rewrites text in which serialized values may be embedded (the
// payload of a Serializable object, such as ArrayObject's
// "x:i:0;a:…;m:a:…"): each embedded value structurally, the text between
// them as text.
func (r *Rewriter) mixed(s string) string {
	if v, ok := r.serialized(s); ok {
		return v
	}
	if len(s) > maxMixed {
		return r.Text(s) // trying a parse at every offset is quadratic
	}
	var b strings.Builder
	gap := 0
	for i := 0; i+1 < len(s); {
		if s[i+1] != ':' || strings.IndexByte("saOC", s[i]) < 0 {
			i++
			continue
		}
		w := &serialWriter{r: r, src: s}
		end, ok := w.value(i, 0)
		if !ok {
			i++
			continue
		}
		b.WriteString(r.Text(s[gap:i]))
		b.WriteString(w.out.String())
		i, gap = end, end
	}
	b.WriteString(r.Text(s[gap:]))
	return b.String()
}
