// Tokenizer for PTX text: identifiers (incl. dotted opcodes and %/$ names), numbers, strings,
// punctuation; comments dropped; directive tokens like ".reg.b32" split into ".reg" ".b32".
#pragma once

#include <string>
#include <vector>

namespace kiln::cuda::vgpu {

struct Token {
  enum Kind : unsigned char { kIdent, kNumber, kString, kPunct, kEnd };
  Kind kind = kEnd;
  std::string text;
  int line = 0;
};

std::vector<Token> lex_ptx(const std::string& text);

}  // namespace kiln::cuda::vgpu
