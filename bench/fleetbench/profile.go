package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// profiler records a CPU profile of this process over one measurement,
// to split its CPU by the goroutine label every server's goroutines
// carry (see startServer): the leader's, the followers', the API
// clients' and the rest (the garbage collector, unlabelled runtime work).
type profiler struct {
	buf  bytes.Buffer
	path string
}

// startProfile starts profiling; path, when set, also gets the profile.
func startProfile(path string) (*profiler, error) {
	p := &profiler{path: path}
	if err := pprof.StartCPUProfile(&p.buf); err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return p, nil
}

// stop ends the profile and returns the CPU time sampled per label value
// ("" for samples without one).
func (p *profiler) stop() (map[string]time.Duration, error) {
	pprof.StopCPUProfile()
	if p.path != "" {
		if err := os.WriteFile(p.path, p.buf.Bytes(), 0o644); err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
	}
	return cpuByLabel(p.buf.Bytes())
}

// maxProfile bounds an inflated CPU profile.
const maxProfile = 256 << 20

// cpuByLabel reads a gzipped pprof profile (profile.proto) and sums each
// sample's CPU time by the value of its "server" or "load" label.
func cpuByLabel(gz []byte) (map[string]time.Duration, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("read profile: %w", err)
	}
	// A profile inflates to a few MiB; a bound keeps a bad one from
	// inflating without end.
	raw, err := io.ReadAll(io.LimitReader(zr, maxProfile+1))
	if err != nil {
		return nil, fmt.Errorf("read profile: %w", err)
	}
	if len(raw) > maxProfile {
		return nil, fmt.Errorf("read profile: larger than %d bytes inflated", maxProfile)
	}
	type sample struct {
		values []int64
		labels [][2]int64 // key, string value (string table indexes)
	}
	var samples []sample
	var strs []string
	valueIndex := -1 // the sample value in nanoseconds
	var types [][2]int64
	err = fields(raw, func(num protowire.Number, typ protowire.Type, b []byte, v uint64) error {
		switch num {
		case 1: // sample_type
			var t [2]int64
			err := fields(b, func(n protowire.Number, _ protowire.Type, _ []byte, v uint64) error {
				if n == 1 || n == 2 {
					t[n-1] = int64(v)
				}
				return nil
			})
			types = append(types, t)
			return err
		case 2: // sample
			var s sample
			err := fields(b, func(n protowire.Number, t protowire.Type, b []byte, v uint64) error {
				switch {
				case n == 2 && t == protowire.VarintType:
					s.values = append(s.values, int64(v))
				case n == 2 && t == protowire.BytesType: // packed
					for len(b) > 0 {
						x, k := protowire.ConsumeVarint(b)
						if k < 0 {
							return protowire.ParseError(k)
						}
						s.values, b = append(s.values, int64(x)), b[k:]
					}
				case n == 3:
					var l [2]int64
					if err := fields(b, func(n protowire.Number, _ protowire.Type, _ []byte, v uint64) error {
						if n == 1 || n == 2 {
							l[n-1] = int64(v)
						}
						return nil
					}); err != nil {
						return err
					}
					s.labels = append(s.labels, l)
				}
				return nil
			})
			samples = append(samples, s)
			return err
		case 6: // string_table
			strs = append(strs, string(b))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read profile: %w", err)
	}
	str := func(i int64) string {
		if i < 0 || int(i) >= len(strs) {
			return ""
		}
		return strs[i]
	}
	for i, t := range types {
		if str(t[1]) == "nanoseconds" {
			valueIndex = i
		}
	}
	if valueIndex < 0 {
		return nil, errors.New("read profile: no sample value in nanoseconds")
	}
	out := map[string]time.Duration{}
	for _, s := range samples {
		if valueIndex >= len(s.values) {
			continue
		}
		who := ""
		for _, l := range s.labels {
			if k := str(l[0]); k == "server" || k == "load" {
				who = str(l[1])
			}
		}
		out[who] += time.Duration(s.values[valueIndex])
	}
	return out, nil
}

// fields calls fn for each field of one protobuf message: its bytes for
// length-delimited fields, its value for varints.
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, b []byte, v uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var val []byte
		var v uint64
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			val, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, typ, val, v); err != nil {
			return err
		}
	}
	return nil
}
