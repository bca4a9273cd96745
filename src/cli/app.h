#pragma once

namespace cellm::cli {

// Parses the command line, runs the chosen subcommand and returns the process exit status.
int main(int argc, char** argv);

}  // namespace cellm::cli
