"""Scripts in the style of pytorch/examples (mnist, vae, dcgan), written for
these tests: argparse, a device from torch.accelerator that falls back to the
CPU, train() and test() functions, DataLoaders with shuffle, a test pass
under no_grad that divides by len(test_loader.dataset), the model saved at
the end.  They know nothing of ranks.  Data: a fake dataset the test writes
(--data, a file of torch tensors), as the real ones download theirs.

    python examples_style.py mnist|vae|dcgan --data FILE [--epochs N] [--save DIR]
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


def pick_device(no_accel):
    # the current examples: torch.accelerator (torch >= 2.6), else the CPU
    if not no_accel and torch.accelerator.is_available():
        return torch.accelerator.current_accelerator()
    return torch.device("cpu")


# ------------------------------------------------------------------ mnist
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(16 * 12 * 12, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def mnist_train(args, model, device, loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                epoch, batch_idx * len(data), len(loader.dataset), 100. * batch_idx / len(loader), loss.item()))


def mnist_test(model, device, loader):
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            correct += output.argmax(dim=1, keepdim=True).eq(target.view_as(output.argmax(dim=1, keepdim=True))).sum().item()
    test_loss /= len(loader.dataset)
    print("Test set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)".format(
        test_loss, correct, len(loader.dataset), 100. * correct / len(loader.dataset)))
    return test_loss


def mnist(args, device, data):
    train_loader = DataLoader(TensorDataset(data["x"], data["y"]), batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(TensorDataset(data["tx"], data["ty"]), batch_size=args.test_batch_size)
    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        mnist_train(args, model, device, train_loader, optimizer, epoch)
        final = mnist_test(model, device, test_loader)
        scheduler.step()
    return {"mnist_cnn.pt": model}, final


# ------------------------------------------------------------------ vae
class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(144, 64)
        self.fc21 = nn.Linear(64, 8)
        self.fc22 = nn.Linear(64, 8)
        self.fc3 = nn.Linear(8, 64)
        self.fc4 = nn.Linear(64, 144)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        return mu + torch.randn_like(std) * std

    def decode(self, z):
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 144))
        return self.decode(self.reparameterize(mu, logvar)), mu, logvar


def vae_loss(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 144), reduction="sum")
    return bce - 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())


def vae(args, device, data):
    imgs = (data["x"][:, :, 8:20, 8:20] > 0).float()  # 12x12 binary images
    timgs = (data["tx"][:, :, 8:20, 8:20] > 0).float()
    train_loader = DataLoader(TensorDataset(imgs, data["y"]), batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(TensorDataset(timgs, data["ty"]), batch_size=args.test_batch_size, shuffle=False)
    model = VAE().to(device)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    final = None
    for epoch in range(1, args.epochs + 1):
        model.train()
        train_loss = 0
        for batch_idx, (x, _) in enumerate(train_loader):
            x = x.to(device)
            optimizer.zero_grad()
            recon, mu, logvar = model(x)
            loss = vae_loss(recon, x, mu, logvar)
            loss.backward()
            train_loss += loss.item()
            optimizer.step()
        print("====> Epoch: {} Average loss: {:.4f}".format(epoch, train_loss / len(train_loader.dataset)))
        model.eval()
        test_loss = 0
        with torch.no_grad():
            for x, _ in test_loader:
                x = x.to(device)
                recon, mu, logvar = model(x)
                test_loss += vae_loss(recon, x, mu, logvar).item()
        final = test_loss / len(test_loader.dataset)
        print("====> Test set loss: {:.4f}".format(final))
    return {"vae.pt": model}, final


# ------------------------------------------------------------------ dcgan
class Generator(nn.Module):
    def __init__(self, nz=8, ngf=8):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
            nn.ConvTranspose2d(ngf, 1, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, ndf=8):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(1, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, x):
        return self.main(x).view(-1, 1).squeeze(1)


def weights_init(m):
    name = m.__class__.__name__
    if name.find("Conv") != -1:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif name.find("BatchNorm") != -1:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


def dcgan(args, device, data):
    imgs = data["x"][:, :, 6:22, 6:22].tanh()  # 16x16 in [-1, 1]
    loader = DataLoader(TensorDataset(imgs), batch_size=args.batch_size, shuffle=True)
    netG, netD = Generator().to(device), Discriminator().to(device)
    netG.apply(weights_init)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(16, 8, 1, 1, device=device)
    optimizerD = optim.Adam(netD.parameters(), lr=args.lr_gan, betas=(0.5, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=args.lr_gan, betas=(0.5, 0.999))
    for epoch in range(args.epochs):
        for i, (real,) in enumerate(loader):
            real = real.to(device)
            b = real.size(0)
            netD.zero_grad()
            errD_real = criterion(netD(real), torch.full((b,), 1.0, device=device))
            errD_real.backward()
            fake = netG(torch.randn(b, 8, 1, 1, device=device))
            errD_fake = criterion(netD(fake.detach()), torch.full((b,), 0.0, device=device))
            errD_fake.backward()
            optimizerD.step()
            netG.zero_grad()
            errG = criterion(netD(fake), torch.full((b,), 1.0, device=device))
            errG.backward()
            optimizerG.step()
            if i % args.log_interval == 0:
                print("[%d/%d][%d/%d] Loss_D: %.4f Loss_G: %.4f" % (epoch, args.epochs, i, len(loader),
                                                                   (errD_real + errD_fake).item(), errG.item()))
    with torch.no_grad():
        sample = netG(fixed_noise)
    print("fixed-noise sample mean %.4f" % sample.mean().item())
    return {"netG.pt": netG, "netD.pt": netD}, float(sample.std())


def main():
    parser = argparse.ArgumentParser(description="pytorch/examples-style scripts")
    parser.add_argument("example", choices=["mnist", "vae", "dcgan"])
    parser.add_argument("--data", required=True, help="the fake dataset (a file of tensors)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--test-batch-size", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--lr-gan", type=float, default=2e-3)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--no-accel", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=4)
    parser.add_argument("--save", default=None, help="folder to save the model(s) in")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    device = pick_device(args.no_accel)
    data = torch.load(args.data)
    models, final = {"mnist": mnist, "vae": vae, "dcgan": dcgan}[args.example](args, device, data)
    print("final %.6f" % final)
    print("checksum %.9e" % sum(float(p.detach().double().sum()) for m in models.values() for p in m.parameters()),
          file=sys.stderr, flush=True)
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        for name, m in models.items():
            torch.save(m.state_dict(), os.path.join(args.save, name))


if __name__ == "__main__":
    main()
