// The codec role's line protocol (schema/conformance/README.md) around quicktype's Go output,
// used as quicktype's README tells a team to: UnmarshalX, then Marshal. tests/test_quicktype.py
// builds it with quicktype's types.go and a table.go that maps each TYPE to its functions.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
)

// codecs maps a TYPE to quicktype's decode-and-encode for it (table.go fills it).
var codecs = map[string]func([]byte) ([]byte, error){}

// path is the best JSON path encoding/json gives: a type error names its field.
func path(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return "$." + te.Field
	}
	return "$"
}

func answer(line string) string {
	typ, text, found := strings.Cut(line, "\t")
	if !found {
		return "error\t$\tno TAB"
	}
	codec, known := codecs[typ]
	if !known {
		return "error\t$\tquicktype made no type " + typ
	}
	out, err := codec([]byte(text))
	if err != nil {
		return "error\t" + path(err) + "\t" + strings.NewReplacer("\t", " ", "\n", " ").Replace(err.Error())
	}
	return "ok\t" + string(out)
}

func main() {
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for {
		line, err := in.ReadString('\n')
		if line != "" {
			out.WriteString(answer(strings.TrimRight(line, "\r\n")) + "\n")
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			os.Exit(1)
		}
	}
}
