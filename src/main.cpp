#include "cli/app.h"

int main(int argc, char** argv) { return cellm::cli::main(argc, argv); }
