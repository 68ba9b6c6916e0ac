// Command wm-codec speaks the codec role's line protocol (schema/conformance/README.md, "The
// codec role") with the generated package: for each line TYPE<TAB>JSON on stdin it writes
// ok<TAB>ENCODED or error<TAB>PATH<TAB>MESSAGE on stdout, in order.
//
//	nvpair-wm-conformance --codec -- go run ./cmd/wm-codec
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	wm "nvpair.dev/wm/consumer"
)

func answer(line []byte) []byte {
	typ, text, found := strings.Cut(string(line), "\t")
	if !found {
		return []byte("error\t$\tno TAB between TYPE and JSON")
	}
	decode, known := wm.Decoders[typ]
	if !known {
		return []byte("error\t$\tunknown TYPE " + typ)
	}
	value, err := decode([]byte(text))
	if err != nil {
		path, message := "$", err.Error()
		var e *wm.Error
		if errors.As(err, &e) {
			path, message = e.Path, e.Reason
		}
		message = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(message)
		return []byte("error\t" + path + "\t" + message)
	}
	return value.AppendJSON([]byte("ok\t"))
}

func main() {
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	defer out.Flush()
	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 {
			line = []byte(strings.TrimRight(string(line), "\r\n"))
			out.Write(answer(line))
			out.WriteByte('\n')
			if in.Buffered() == 0 {
				out.Flush() // answer as soon as the input pauses: a caller may wait line by line
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "wm-codec:", err)
			os.Exit(1)
		}
	}
}
