// Tokenizer for PTX (see ptx_lexer.h).
#include "runtime/cuda/virtual/ptx_lexer.h"

#include <cctype>

#include "runtime/cuda/virtual/fault.h"

namespace kiln::cuda::vgpu {
namespace {

bool ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%' ||
         c == '.';
}
bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%' ||
         c == '.';
}

}  // namespace

std::vector<Token> lex_ptx(const std::string& s) {
  std::vector<Token> out;
  out.reserve(s.size() / 4);
  int line = 1;
  std::size_t i = 0, n = s.size();
  while (i < n) {
    char c = s[i];
    if (c == '\n') {
      ++line, ++i;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c)) || c == '\0') {  // NUL: C-string images
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      i += 2;
      while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/')) {
        if (s[i] == '\n') ++line;
        ++i;
      }
      i += 2;
      continue;
    }
    Token t;
    t.line = line;
    if (c == '"') {
      std::size_t j = i + 1;
      while (j < n && s[j] != '"') {
        if (s[j] == '\\') ++j;
        ++j;
      }
      t.kind = Token::kString;
      t.text = s.substr(i + 1, j - i - 1);
      i = j + 1;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      bool hex = c == '0' && i + 1 < n && std::isalpha(static_cast<unsigned char>(s[i + 1]));
      while (j < n) {
        char d = s[j];
        if (std::isalnum(static_cast<unsigned char>(d)) || d == '.') {
          ++j;
        } else if (!hex && (d == '-' || d == '+') && (s[j - 1] == 'e' || s[j - 1] == 'E')) {
          ++j;  // decimal exponent: 1.5e-3
        } else {
          break;
        }
      }
      t.kind = Token::kNumber;
      t.text = s.substr(i, j - i);
      i = j;
    } else if (ident_start(c)) {
      std::size_t j = i + 1;
      while (j < n) {
        if (ident_char(s[j])) {
          ++j;
        } else if (s[j] == ':' && j + 1 < n && s[j + 1] == ':') {
          j += 2;  // .L2::cache_hint and friends
        } else {
          break;
        }
      }
      std::string word = s.substr(i, j - i);
      i = j;
      if (word[0] == '.' && word.find('.', 1) != std::string::npos) {
        // ".reg.b32" -> ".reg" ".b32" (inline asm in cuda_fp16.hpp writes it so)
        std::size_t p = 0;
        while (p < word.size()) {
          std::size_t q = word.find('.', p + 1);
          if (q == std::string::npos) q = word.size();
          out.push_back({Token::kIdent, word.substr(p, q - p), line});
          p = q;
        }
        continue;
      }
      t.kind = Token::kIdent;
      t.text = std::move(word);
    } else {
      t.kind = Token::kPunct;
      t.text = std::string(1, c);
      ++i;
    }
    out.push_back(std::move(t));
  }
  out.push_back({Token::kEnd, "", line});
  return out;
}

}  // namespace kiln::cuda::vgpu
