// Command aspctl is the command-line client of aspd, for operators and for
// agents.
//
// Operator commands (agent ..., sessions ..., export, operator-token ...,
// audit, whoami) call the operator API under /admin/v1 with an operator
// token (the bootstrap --admin-token of aspd, or a named one); agent
// commands (session ..., send, join, invite, leave, end, reopen, history,
// listen) call the ASP agent API with an agent token. Every command prints the server's JSON answer,
// pretty-printed, on stdout, so that it can be piped into jq; export and
// listen print JSON Lines. An API error prints the server's error code and
// message on stderr and exits 1; a usage error exits 2.
//
// Global flags come before the command; each has an environment variable:
//
//	--server            ASPCTL_SERVER            (default http://127.0.0.1:8080)
//	--token             ASPCTL_TOKEN             agent token
//	--token-file        ASPCTL_TOKEN_FILE        file holding the agent token
//	--admin-token       ASPCTL_ADMIN_TOKEN       operator token
//	--admin-token-file  ASPCTL_ADMIN_TOKEN_FILE  file holding the operator token
//	                                             (default ./aspd-data/admin.token, if it exists)
//
// Run `aspctl -h` for the command list and `aspctl COMMAND -h` for a
// command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one aspctl invocation and returns its exit status:
// 0 success, 1 failure (API, network, server close), 2 usage error.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

// runContext is run with a context; cancelling it stops the command (for
// listen, like SIGINT: a normal close and exit 0).
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := &app{ctx: ctx, stdout: stdout, stderr: stderr}
	rest, err := app.parseGlobal(args)
	if err != nil {
		return app.exit(err)
	}
	return app.exit(app.dispatch(rest))
}

// defaultAdminTokenFile is where aspd writes the operator token on first
// start with its default --data-dir.
const defaultAdminTokenFile = "aspd-data/admin.token"

// app is one invocation: global configuration and output streams.
type app struct {
	ctx            context.Context
	stdout, stderr io.Writer

	server         string
	token          string
	tokenFile      string
	adminToken     string
	adminTokenFile string
	adminFromFlag  bool // --admin-token given on the command line
	fileFromFlag   bool // --admin-token-file given on the command line

	tokenFromFlag, tokenFileFromFlag bool // --token, --token-file given
}

// command is one aspctl command: its name ("agent create"), positional
// synopsis, one-line description and implementation. run receives the
// arguments after the name.
type command struct {
	name string
	args string
	desc string
	run  func(a *app, cmd *command, args []string) error
}

// commands lists every command in the order of the usage text; section
// headers are entries with no run function.
var commands []*command

func init() {
	commands = append(commands, &command{name: "Operator commands (admin token):"})
	commands = append(commands, adminCommands...)
	commands = append(commands, chorusCommands...)
	commands = append(commands, operatorCommands...) // operator.go
	commands = append(commands, &command{name: "Agent commands (agent token):"})
	commands = append(commands, agentCommands...)
	commands = append(commands, decideCommand) // decide.go
}

func (a *app) parseGlobal(args []string) ([]string, error) {
	fs := flag.NewFlagSet("aspctl", flag.ContinueOnError)
	fs.StringVar(&a.server, "server", envOr("ASPCTL_SERVER", "http://127.0.0.1:8080"), "aspd base URL (env ASPCTL_SERVER)")
	// Tokens are never flag defaults, even from the environment: package
	// flag prints defaults in the usage (on -h and after every flag
	// mistake). The environment is read after parsing instead.
	fs.StringVar(&a.token, "token", "", secretUsage("agent token, for agent commands (env ASPCTL_TOKEN)", "ASPCTL_TOKEN"))
	fs.StringVar(&a.tokenFile, "token-file", "", "file holding the agent token (env ASPCTL_TOKEN_FILE)")
	fs.StringVar(&a.adminToken, "admin-token", "", secretUsage("operator token, for operator commands (env ASPCTL_ADMIN_TOKEN)", "ASPCTL_ADMIN_TOKEN"))
	fs.StringVar(&a.adminTokenFile, "admin-token-file", "", "file holding the operator token (env ASPCTL_ADMIN_TOKEN_FILE; default ./"+defaultAdminTokenFile+" if it exists)")
	fs.Usage = func() { a.usage(fs.Output(), fs) }
	if err := a.parseFlags(fs, args); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) {
		a.adminFromFlag = a.adminFromFlag || f.Name == "admin-token"
		a.fileFromFlag = a.fileFromFlag || f.Name == "admin-token-file"
		a.tokenFromFlag = a.tokenFromFlag || f.Name == "token"
		a.tokenFileFromFlag = a.tokenFileFromFlag || f.Name == "token-file"
	})
	a.server = strings.TrimRight(a.server, "/")
	if err := checkServer(a.server); err != nil {
		return nil, err
	}
	if fs.NArg() == 0 {
		fs.SetOutput(a.stderr)
		a.usage(a.stderr, fs)
		return nil, usageErrorf("no command given")
	}
	return fs.Args(), nil
}

// secretUsage marks a secret flag's help when the environment sets it; the
// value itself is never shown.
func secretUsage(help, env string) string {
	if os.Getenv(env) != "" {
		return help + " (set from " + env + "; value not shown)"
	}
	return help
}

// resolveToken returns the agent token: --token or --token-file, else
// ASPCTL_TOKEN or ASPCTL_TOKEN_FILE ("" when none is set).
func (a *app) resolveToken() (string, error) {
	return pickToken("token", "ASPCTL_TOKEN", a.token, a.tokenFile, a.tokenFromFlag, a.tokenFileFromFlag)
}

// pickToken picks a token from its four places, first found wins: the flag
// --NAME, the flag --NAME-file, the variable ENV, the variable ENV_FILE. The
// command line wins over the environment; a token and a token file at the
// same level (both flags, or both variables) are a mistake. An empty value
// counts as not set. It returns "" when no place holds one.
func pickToken(name, env, value, file string, valueSet, fileSet bool) (string, error) {
	envTok, envFile := os.Getenv(env), os.Getenv(env+"_FILE")
	switch {
	case valueSet && fileSet:
		return "", usageErrorf("--%s and --%s-file are both given: give one", name, name)
	case valueSet && value != "":
		return value, nil
	case fileSet && file != "":
		return readTokenFile(file, "--"+name+"-file "+file)
	case envTok != "" && envFile != "":
		return "", usageErrorf("%s and %s_FILE are both set: set one", env, env)
	case envTok != "":
		return envTok, nil
	case envFile != "":
		return readTokenFile(envFile, env+"_FILE="+envFile)
	}
	return "", nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// dispatch finds the command named by the first one or two words of args.
func (a *app) dispatch(args []string) error {
	for _, n := range []int{2, 1} {
		if len(args) < n {
			continue
		}
		name := strings.Join(args[:n], " ")
		for _, c := range commands {
			if c.run != nil && c.name == name {
				return c.run(a, c, args[n:])
			}
		}
	}
	if args[0] == "help" {
		a.usage(a.stdout, nil)
		return nil
	}
	name, subs := args[0], subcommands(args[0])
	switch {
	case len(subs) > 0 && len(args) == 1:
		return usageErrorf("%s needs a subcommand: %s", name, strings.Join(subs, ", "))
	case len(subs) > 0:
		name += " " + args[1]
	}
	return usageErrorf("unknown command %q (run aspctl -h for the list)", name)
}

// subcommands lists the second words of the commands that start with
// group ("agent" -> create, list, ...).
func subcommands(group string) []string {
	var out []string
	for _, c := range commands {
		if sub, ok := strings.CutPrefix(c.name, group+" "); ok && c.run != nil {
			out = append(out, sub)
		}
	}
	return out
}

func (a *app) usage(w io.Writer, global *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: aspctl [global flags] COMMAND [flags] [args]\n\naspctl is the command-line client of aspd (Agent Session Protocol).\nOutput is the server's JSON, pretty-printed; errors go to stderr (exit 1; usage errors exit 2).\n")
	for _, c := range commands {
		if c.run == nil {
			fmt.Fprintf(w, "\n%s\n", c.name)
			continue
		}
		fmt.Fprintf(w, "  %-22s %s\n", c.name, c.desc)
	}
	fmt.Fprintf(w, "\nRun 'aspctl COMMAND -h' for a command's arguments and flags.\n")
	if global != nil {
		fmt.Fprintf(w, "\nGlobal flags (before COMMAND):\n")
		global.PrintDefaults()
	}
}

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exit reports err on stderr and maps it to an exit status.
func (a *app) exit(err error) int {
	var ue *usageError
	var ae *apiError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(a.stderr, "aspctl: %s\n", ue.msg)
		return 2
	case errors.As(err, &ae):
		fmt.Fprintf(a.stderr, "aspctl: %s: %s (HTTP %d)\n", ae.Code, ae.Message, ae.Status)
		return 1
	case errors.Is(err, errFlagParse):
		return 2 // the flag package has printed the error and the usage
	default:
		fmt.Fprintf(a.stderr, "aspctl: %v\n", err)
		return 1
	}
}

// errFlagParse marks a flag parsing error already reported by package flag.
var errFlagParse = errors.New("invalid flags")

// flags returns the flag set of a command, printing its usage on -h.
func (a *app) flags(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet("aspctl "+c.name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: aspctl %s %s\n\n%s\n", c.name, c.args, c.desc)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintf(fs.Output(), "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses flags, printing the usage on stdout for -h and with
// the error on stderr for a mistake.
func (a *app) parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(a.stdout)
		fs.Usage()
		return err
	default:
		fs.SetOutput(a.stderr)
		fmt.Fprintf(a.stderr, "%s: %v\n", fs.Name(), err)
		fs.Usage()
		return errFlagParse
	}
}

// parse parses flags and positional arguments in any order ("--" ends the
// flags) and checks the number of positional arguments: at least minArgs,
// at most maxArgs (maxArgs < 0: no limit).
func (a *app) parse(fs *flag.FlagSet, args []string, minArgs, maxArgs int) ([]string, error) {
	var pos []string
	for {
		if err := a.parseFlags(fs, args); err != nil {
			return nil, err
		}
		consumed := len(args) - fs.NArg()
		rest := fs.Args()
		if consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(pos) < minArgs || maxArgs >= 0 && len(pos) > maxArgs {
		fs.SetOutput(a.stderr)
		fmt.Fprintf(a.stderr, "%s: wrong number of arguments\n", fs.Name())
		fs.Usage()
		return nil, errFlagParse
	}
	return pos, nil
}

// splitList splits comma-separated values of one or more arguments,
// dropping empty items: ("@a.b,@c.d", "@e.f") -> [@a.b @c.d @e.f].
func splitList(args ...string) []string {
	out := []string{}
	for _, arg := range args {
		for _, v := range strings.Split(arg, ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}
