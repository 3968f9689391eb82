// Command podhash is test tooling (never part of Flotilla): it prints what Argo Rollouts
// computes for pod templates, as golden vectors for Flotilla's own implementation, and the Go
// type graph of a PodTemplateSpec as Go's encoding/json walks it.
//
//	podhash schema          the JSON schema of corev1.PodTemplateSpec in Go field order
//	podhash vectors < CASES the cases (a JSON array of {"name", "template"}), each with Go's
//	                        JSON encoding and Argo's ComputePodTemplateHash with no collision
//	                        count and with the counts 0, 1 and 7
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/argoproj/argo-rollouts/utils/hash"
	corev1 "k8s.io/api/core/v1"
)

// field is one JSON member of a struct, in Go's order.
type field struct {
	Name      string `json:"name"`
	OmitEmpty bool   `json:"omitEmpty"`
	OmitZero  bool   `json:"omitZero"`
	Type      string `json:"type"`
}

var marshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()

// describe names a type: "string", "bool", "int", "float", "bytes", "custom:T" (a type with its
// own MarshalJSON), "struct:T", "ptr:D", "slice:D", "map:D" (string keys).
func describe(t reflect.Type, structs map[string][]field) string {
	if t.Kind() == reflect.Pointer {
		return "ptr:" + describe(t.Elem(), structs)
	}
	if t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler) {
		return "custom:" + t.Name()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "int"
	case reflect.Float32, reflect.Float64:
		return "float"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "bytes"
		}
		return "slice:" + describe(t.Elem(), structs)
	case reflect.Map:
		return "map:" + describe(t.Elem(), structs)
	case reflect.Struct:
		name := t.Name()
		if _, seen := structs[name]; !seen {
			structs[name] = nil // placeholder against recursion
			structs[name] = fields(t, structs)
		}
		return "struct:" + name
	}
	panic("unsupported kind " + t.Kind().String() + " of " + t.String())
}

// fields lists a struct's JSON members in Go's order, embedded structs without a JSON name
// inlined where they stand.
func fields(t reflect.Type, structs map[string][]field) []field {
	var out []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		parts := strings.Split(tag, ",")
		name := parts[0]
		omit, zero := false, false
		for _, p := range parts[1:] {
			switch p {
			case "omitempty":
				omit = true
			case "omitzero":
				zero = true
			}
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, fields(f.Type, structs)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, field{Name: name, OmitEmpty: omit, OmitZero: zero, Type: describe(f.Type, structs)})
	}
	return out
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: podhash schema|vectors")
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	switch os.Args[1] {
	case "schema":
		structs := map[string][]field{}
		root := describe(reflect.TypeOf(corev1.PodTemplateSpec{}), structs)
		names := make([]string, 0, len(structs))
		for n := range structs {
			names = append(names, n)
		}
		sort.Strings(names)
		ordered := make([]map[string]any, 0, len(names))
		for _, n := range names {
			ordered = append(ordered, map[string]any{"type": n, "fields": structs[n]})
		}
		must(out.Encode(map[string]any{"root": root, "structs": ordered}))
	case "vectors":
		var cases []struct {
			Name     string          `json:"name"`
			Template json.RawMessage `json:"template"`
		}
		must(json.NewDecoder(os.Stdin).Decode(&cases))
		type vector struct {
			Name     string            `json:"name"`
			Template json.RawMessage   `json:"template"`
			GoJSON   string            `json:"goJson"`
			Hash     string            `json:"hash"`
			Collided map[string]string `json:"collided"`
		}
		var vectors []vector
		for _, c := range cases {
			var t corev1.PodTemplateSpec
			must(json.Unmarshal(c.Template, &t))
			encoded, err := json.Marshal(&t)
			must(err)
			v := vector{Name: c.Name, Template: c.Template, GoJSON: string(encoded),
				Hash: hash.ComputePodTemplateHash(&t, nil), Collided: map[string]string{}}
			for _, n := range []int32{0, 1, 7} {
				count := n
				v.Collided[fmt.Sprint(n)] = hash.ComputePodTemplateHash(&t, &count)
			}
			vectors = append(vectors, v)
		}
		must(out.Encode(vectors))
	default:
		fmt.Fprintln(os.Stderr, "usage: podhash schema|vectors")
		os.Exit(2)
	}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "podhash:", err)
		os.Exit(1)
	}
}
