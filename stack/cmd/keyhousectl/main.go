// Command keyhousectl is a small operator CLI for Keyhouse. Its one command, import,
// brings licenses exported from another system into Keyhouse with their keys unchanged:
//
//	keyhousectl import --from lemonsqueezy|keygen|gumroad [--product P] [--tier T]
//	    [--on-conflict skip|fail] [--url URL] [--api-key KEY] FILE...
//
// --url and --api-key default to KEYHOUSE_URL and KEYHOUSE_API_KEY. Licenses go in calls
// of 1,000; a call answered 429 or 503 is retried after its Retry-After. A record that
// cannot be a license is reported by its place in the file and the others are imported;
// the exit status is 1 when any was invalid. Records with one key are one license (the
// first; a later one with other terms is reported with both places). Running the same
// import again changes nothing (docs/import.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/keyhouse/keyhouse/stack/importer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "keyhousectl: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "import" {
		return errors.New("usage: keyhousectl import --from lemonsqueezy|keygen|gumroad FILE...")
	}
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "the export's format: "+strings.Join(sources(), ", "))
	product := fs.String("product", "", "product_id of every license (default: the source's product id, prefixed with the source)")
	tier := fs.String("tier", "pro", "tier of every license")
	onConflict := fs.String("on-conflict", "fail", `a key that exists with other terms: "skip" it, or "fail" the batch`)
	// The environment is read after parsing, not as the flags' defaults: the flag package
	// prints a default in its usage (-h, a mistyped flag), and the key would land in
	// terminals and CI logs.
	url := fs.String("url", "", "Keyhouse API base URL (default: $KEYHOUSE_URL)")
	apiKey := fs.String("api-key", "", "admin key or tenant API key (default: $KEYHOUSE_API_KEY)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *url == "" {
		*url = os.Getenv("KEYHOUSE_URL")
	}
	if *apiKey == "" {
		*apiKey = os.Getenv("KEYHOUSE_API_KEY")
	}
	convert, ok := importer.Sources[*from]
	switch {
	case !ok:
		return fmt.Errorf("--from must be one of %s", strings.Join(sources(), ", "))
	case *onConflict != "skip" && *onConflict != "fail":
		// Refused before a file is read: the API would refuse the first call, after the
		// files were read, in words that name its field rather than this flag.
		return fmt.Errorf("--on-conflict must be skip or fail, not %q", *onConflict)
	case fs.NArg() == 0:
		return errors.New("name the export file(s) to import")
	case *url == "":
		return errors.New("--url or KEYHOUSE_URL is required")
	case *apiKey == "":
		return errors.New("--api-key or KEYHOUSE_API_KEY is required")
	}
	var all []importer.License
	var rejected []importer.Rejected
	for _, name := range fs.Args() {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		ls, bad, err := convert(f, importer.Options{Product: *product, Tier: *tier})
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for i := range ls {
			ls[i].Where = name + " " + ls[i].Where
		}
		for _, b := range bad {
			rejected = append(rejected, importer.Rejected{Where: name + " " + b.Where, Reason: b.Reason})
		}
		all = append(all, ls...)
	}
	c := &importer.Client{URL: *url, APIKey: *apiKey, OnConflict: *onConflict,
		Progress: func(done, total int) { fmt.Fprintf(stderr, "%d/%d\n", done, total) }}
	sum, err := c.Import(ctx, all)
	invalid := len(rejected)
	if sum != nil {
		invalid += sum.Invalid
		repeated := ""
		if sum.Repeated > 0 {
			repeated = fmt.Sprintf(", %d repeated", sum.Repeated)
		}
		fmt.Fprintf(stdout, "%d licenses read: %d imported, %d unchanged, %d skipped, %d invalid%s (%d calls, %d retried)\n",
			len(all)+len(rejected), sum.Imported, sum.Unchanged, sum.Skipped, invalid, repeated, sum.Calls, sum.Retries)
		// The file's own rejects first, then the API's answers, each by its place in the file.
		for _, b := range rejected {
			fmt.Fprintf(stdout, "  %s: invalid: %s\n", b.Where, b.Reason)
		}
		for _, p := range sum.Problems {
			msg := ""
			if p.Error != nil {
				msg = *p.Error
			}
			fmt.Fprintf(stdout, "  %s: %s: %s\n", all[p.Index].Where, p.Result, msg)
		}
	}
	switch {
	case err != nil:
	case invalid > 0:
		// The valid licenses are in; the exit status tells a script that some were not.
		err = fmt.Errorf("%d invalid %s not imported (listed above)", invalid, plural(invalid, "license was", "licenses were"))
	case *onConflict != "skip" && sum.RepeatedWithOtherTerms > 0:
		// The file's other licenses are in, but it asked for two licenses under one key,
		// and a conflict was to fail.
		n := sum.RepeatedWithOtherTerms
		err = fmt.Errorf("%d %s not imported: the key is on an earlier line with other terms (listed above)", n, plural(n, "license was", "licenses were"))
	}
	return err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func sources() []string {
	var names []string
	for n := range importer.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
