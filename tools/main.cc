// infera: one program from a model file to generated text.
#include "tools/cli_main.h"

int main(int argc, char** argv) { return infera::cli::Main(argc, argv); }
