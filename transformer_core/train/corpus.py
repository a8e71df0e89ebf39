"""A short text about Transformers, written for this project, that the shipped language model learns."""

ENGLISH = """\
A Transformer reads a sentence as a row of tokens. Each token becomes a vector, and a second vector \
tells the model where the token stands in the row. The sum of the two is the first picture the model has \
of the sentence.

Attention lets every token look at the other tokens. A token asks a question with its query, the other \
tokens answer with their keys, and the answers are weighted by how well query and key agree. The weights \
of one row add up to one, so each token takes a mix of the values it found. Many heads do this at the \
same time, and each head can look for something different: the token before, the same word earlier, or \
the end of the sentence.

After attention comes a small feed-forward network that works on each token alone. Around both parts \
there is a residual path and a layer norm, so the signal can pass through many layers without fading. \
The last layer turns each vector into a score for every token in the vocabulary, and a softmax turns the \
scores into probabilities for the next token.

A language model learns by guessing the next token again and again. When the guess is wrong, the loss \
is large, and the gradient moves the weights a little. After many small steps the model has learned \
which tokens tend to follow which, and it can write new text one token at a time.

An encoder reads the whole input at once. A decoder writes the output one token at a time, and it may \
only look at the tokens it has already written. In cross-attention the decoder asks the questions and \
the encoder gives the keys and the values, so every new token can look back at the input.
"""

CHINESE = """\
Transformer 把一句话看成一串词元。每个词元先变成一个向量，再加上表示位置的向量。\
注意力让每个词元去看其他词元：查询提出问题，键给出回答，值被按权重混合起来。\
多个注意力头同时工作，每个头关注不同的东西。语言模型一次又一次地猜下一个词元，\
猜错了就根据损失调整权重，慢慢学会一个词元后面常跟着哪个词元。
"""

TEXT = ENGLISH + "\n" + CHINESE
EXAMPLE_PROMPT = "Attention lets every token"
