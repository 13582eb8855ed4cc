// The infera command line, as a library function: the program's main() is
// this one call (tools/main.cc), and the CLI's compilation (CLI11 and the
// subcommand table) stays in infera_cli's precompiled, unity-built files.
#pragma once

namespace infera::cli {

// Parses argv (global flags, one subcommand), runs the command and returns the
// process exit code (cli_common.h: kExitOk, kExitBadInput, kExitInternal).
int Main(int argc, char** argv);

}  // namespace infera::cli
