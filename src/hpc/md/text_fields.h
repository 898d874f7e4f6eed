// Tokenizing and number parsing shared by the .gro, .mdp and .top readers;
// every failure names the file and line ("conf.gro:7: ...").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qk::md {

// "path:line: " (line 0: just "path: ").
std::string where(const std::string& file, int line);

std::string_view trim(std::string_view s);
std::vector<std::string_view> split_whitespace(std::string_view s);
std::string lower(std::string_view s);
bool iequals(std::string_view a, std::string_view b);

// The whole token as a number, or a ValueError "file:line: expected <what>, got 'tok'".
double parse_double(std::string_view tok, const std::string& file, int line, std::string_view what);
long long parse_int(std::string_view tok, const std::string& file, int line, std::string_view what);

}  // namespace qk::md
