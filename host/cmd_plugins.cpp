// Placeholder until the plugin loader lands (issue 2): lists nothing.
#include "command_registry.hpp"
